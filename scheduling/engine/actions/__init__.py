"""The actions of a cycle, one module each, in the order `scheduling.engine.cycle.ACTIONS` runs them."""
