"""Process grids, the instrumented communication layer, and process launch."""
from .comm import Comm, CommLog, NullComm, PhaseStats
from .grid import AXES, ProcessGrid, grid_shape

__all__ = ["AXES", "Comm", "CommLog", "NullComm", "PhaseStats", "ProcessGrid", "grid_shape"]
