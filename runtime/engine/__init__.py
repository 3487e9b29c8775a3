"""The interpreter: run state, inbox, step context, services, trace and the run store."""

from runtime.engine.interpreter import Engine, RunResult, output_of

__all__ = ["Engine", "RunResult", "output_of"]
