from sim_harness import harness

__all__ = ["harness"]
