"""What `runtime serve` was started with, and the app built from it (also in each worker)."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from runtime.serve.limits import Limits

if TYPE_CHECKING:
    from starlette.applications import Starlette

# uvicorn's workers are new processes: they read the configuration from here. It holds
# paths and limits only; a token comes from $RUNTIME_SERVE_TOKEN or the token file.
ENV_CONFIG = "RUNTIME_SERVE_CONFIG"


@dataclass
class ServeConfig:
    """The command line of `runtime serve`, without secrets."""

    pipelines: list[str]
    host: str = "127.0.0.1"
    store: str | None = None
    index: str | None = None
    model: str | None = None
    token_file: str | None = None
    subjects_file: str | None = None
    eval_reports: list[str] = field(default_factory=list)
    max_body_bytes: int = Limits.max_body_bytes
    max_runs: int = Limits.max_runs
    deadline: float = Limits.deadline
    retry_after: int = Limits.retry_after

    def to_env(self) -> str:
        """The JSON the workers read from $RUNTIME_SERVE_CONFIG."""
        return json.dumps(asdict(self))

    @classmethod
    def from_env(cls) -> ServeConfig:
        """The configuration the serving process left in $RUNTIME_SERVE_CONFIG."""
        return cls(**json.loads(os.environ[ENV_CONFIG]))


def build_app(config: ServeConfig) -> Starlette:
    """Load the pipelines, open the store, check auth (refusing a bad setup) and build the app."""
    from runtime.engine.stores import open_run_store
    from runtime.serve import auth as _auth
    from runtime.serve.app import build_server, create_app
    from runtime.serve.served import load_served

    checked = _auth.configure(config.host, config.token_file, config.subjects_file)
    store = open_run_store(config.store)
    served = load_served(config.pipelines, store=store, index=config.index, model=config.model)
    reports: dict[str, Any] = {}
    for path in config.eval_reports:
        with open(path, encoding="utf-8") as f:
            reports[path] = json.load(f)
    limits = Limits(config.max_body_bytes, config.max_runs, config.deadline, config.retry_after)
    return create_app(build_server(served, store, auth=checked, limits=limits, reports=reports))


def worker_app() -> Starlette:
    """uvicorn's app factory in each worker process (`runtime serve --workers N`)."""
    return build_app(ServeConfig.from_env())
