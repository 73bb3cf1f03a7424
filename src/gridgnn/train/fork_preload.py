"""What the launcher's fork server imports last (:data:`gridgnn.distributed.launch.FORKSERVER_PRELOAD`), before it
forks any rank, for every rank to inherit: the numba kernels set up with numba's compiler target initialized
(:func:`gridgnn.ops.kernels.prepare`, a rank's first kernel call) and the plots' matplotlib (:mod:`.report`, rank 0
of a run with ``--out``). Each is a speed-up only and guarded: the fork server must start whatever happens here (it
survives only an ``ImportError`` of a module it preloads), and what fails is left to the rank that needs it, as
without the preload (matplotlib refuses an invalid ``MPLBACKEND`` at import, for one)."""
try:
    from ..ops.kernels import prepare

    prepare()
except Exception:  # noqa: BLE001 - see the module docstring
    pass

try:
    from . import report  # noqa: F401 - imported for the ranks
except Exception:  # noqa: BLE001
    pass
