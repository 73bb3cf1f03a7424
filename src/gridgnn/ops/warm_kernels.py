"""Imported by the launcher's fork server (:data:`gridgnn.distributed.launch.FORKSERVER_PRELOAD`) before it forks
any rank: the numba kernels set up and numba's compiler target initialized once (:func:`gridgnn.ops.kernels.prepare`),
which every forked rank inherits. A fork server must start whatever happens here: a failure leaves the work to each
rank's first kernel call, as without it."""
from .kernels import prepare

try:
    prepare()
except Exception:  # noqa: BLE001 - a speed-up only: a rank sets the kernels up itself on its first call
    pass
