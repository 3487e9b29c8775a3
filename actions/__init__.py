"""Built-in step actions, one module per action (see runtime/action.py for the contract)."""
