r"""gridgnn: communication-avoiding distributed GNN training on ``torch.distributed``.

Rooms (dependencies point downward): ``cli``/``train`` → ``nn`` → ``parallel`` → ``partition``/``planner``
→ ``ops`` → ``graph`` → ``dist``. See ``DESIGN`` notes in the README.
"""
from .errors import GridGnnError

__version__ = "0.1.0"
__all__ = ["GridGnnError", "__version__"]
