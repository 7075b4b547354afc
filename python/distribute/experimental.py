"""tf.distribute.experimental pieces: saving on preemption, and the
collectives' options (CommunicationOptions).

PreemptionCheckpointHandler (TF's tf.distribute.experimental
.PreemptionCheckpointHandler, the C++ distribute/preemption.h): built over a
Checkpoint and a directory, it restores the latest checkpoint there and then
watches for SIGTERM (what Slurm, Kubernetes and cloud preemption send). After
a SIGTERM to any worker, run() lets the step in progress finish, every worker
saves one checkpoint at the same call, and the program exits with status 42
(sys.exit, as TF's); rerunning the same command resumes from it:

    strategy = distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
      ...
      ckpt = distribute.Checkpoint(model=w, iterator=it)
      handler = distribute.experimental.PreemptionCheckpointHandler(ckpt, "/ckpt")
    for step in range(handler.total_run_calls, steps):
      handler.run(distributed_step, next(it))
"""
import signal
import sys
import threading

import numpy as np

from .errors import FailedPreconditionError, InvalidArgumentError

class CommunicationImplementation:
  """TF's tf.distribute.experimental.CommunicationImplementation. This
  library's collectives are its own, on CPUs: AUTO and RING choose them,
  NCCL (GPUs) is refused."""
  AUTO = "AUTO"
  RING = "RING"
  NCCL = "NCCL"


class CommunicationOptions:
  """TF's tf.distribute.experimental.CommunicationOptions, for
  MultiWorkerMirroredStrategy(communication_options=...) and a collective's
  ``options``: ``timeout_seconds`` bounds every wait on another worker (None:
  the strategy's default). ``bytes_per_pack`` is accepted and has no effect:
  the tensors of one call always travel as one pack."""

  def __init__(self, bytes_per_pack=0, timeout_seconds=None, implementation=CommunicationImplementation.AUTO):
    if isinstance(bytes_per_pack, bool) or not isinstance(bytes_per_pack, int) or bytes_per_pack < 0:
      raise InvalidArgumentError(f"CommunicationOptions: expected bytes_per_pack to be a non-negative int, got "
                                 f"{bytes_per_pack!r}")
    if timeout_seconds is not None and (isinstance(timeout_seconds, bool) or
                                        not isinstance(timeout_seconds, (int, float)) or not timeout_seconds > 0):
      raise InvalidArgumentError(f"CommunicationOptions: expected timeout_seconds to be None or a positive number, "
                                 f"got {timeout_seconds!r}")
    if implementation not in (CommunicationImplementation.AUTO, CommunicationImplementation.RING):
      raise InvalidArgumentError(f"CommunicationOptions: expected implementation AUTO or RING (this library's CPU "
                                 f"collectives), got {implementation!r}")
    self.bytes_per_pack, self.timeout_seconds, self.implementation = bytes_per_pack, timeout_seconds, implementation

  def __repr__(self):
    return (f"CommunicationOptions(bytes_per_pack={self.bytes_per_pack}, timeout_seconds={self.timeout_seconds}, "
            f"implementation={self.implementation})")


RUN_CALLS_NAME = "checkpointed_runs"
_RESTART_CODE = 42
_watching = threading.Lock()  # held by the handler that watches SIGTERM


def _require_cross_replica(method):
  from .strategy import has_strategy, in_cross_replica_context
  if has_strategy() and not in_cross_replica_context():
    raise FailedPreconditionError(f"PreemptionCheckpointHandler.{method}: expected a call in cross-replica context "
                                  f"(the training loop), got one inside a replica function; call it around "
                                  f"strategy.run, not inside it")


class TerminationConfig:
  """What counts as a termination notice and what happens after the save
  (TF's tf.distribute.experimental.TerminationConfig).

  termination_watcher_fn: returns True once this worker is to stop; called
  once per run(), must be cheap. None: a SIGTERM was received (the handler
  installs a SIGTERM handler; Python runs it on the main thread).
  exit_fn: called on every worker after the save. None: sys.exit(42). An
  exit_fn that returns lets training go on (the notice is then forgotten).
  grace_period: accepted for TF's signature; the save happens at the first
  run() after the notice in any case."""

  def __init__(self, termination_watcher_fn=None, exit_fn=None, grace_period=None, save_fn=None):
    if save_fn is not None:
      raise InvalidArgumentError("TerminationConfig: save_fn is not supported; the handler saves its Checkpoint")
    self.termination_watcher_fn = termination_watcher_fn
    self.exit_fn = exit_fn
    self.grace_period = grace_period


class PreemptionCheckpointHandler:
  """See the module docstring. Construct it inside the strategy's scope (it
  creates a variable for its count of run() calls, saved in the checkpoint
  as "checkpointed_runs"). close() gives SIGTERM back its previous handler
  (also done when the program exits through the handler)."""

  def __init__(self, checkpoint, checkpoint_dir, termination_config=None):
    import os
    from . import latest_checkpoint
    from .strategy import get_strategy
    from .variables import Variable, _path
    _require_cross_replica("PreemptionCheckpointHandler")
    if not checkpoint_dir:
      raise InvalidArgumentError("PreemptionCheckpointHandler: expected a checkpoint directory, got an empty name")
    if any(name == RUN_CALLS_NAME for name, _ in checkpoint._tracked):
      raise InvalidArgumentError(f"PreemptionCheckpointHandler: the checkpoint already tracks {RUN_CALLS_NAME!r}, "
                                 f"the name under which the handler saves its count of run() calls")
    config = termination_config or TerminationConfig()
    self._checkpoint = checkpoint
    self._dir = os.fsdecode(_path(checkpoint_dir, "PreemptionCheckpointHandler"))
    self._watcher = config.termination_watcher_fn
    self._exit = config.exit_fn
    self._strategy = get_strategy()
    self._signalled = False
    self._previous = None
    self._watching = False
    try:
      os.makedirs(self._dir, exist_ok=True)
    except OSError as e:
      raise FailedPreconditionError(f"PreemptionCheckpointHandler: cannot create the checkpoint directory "
                                    f"{self._dir!r}: {e.strerror}") from None
    if self._watcher is None:
      if not _watching.acquire(blocking=False):
        raise FailedPreconditionError("PreemptionCheckpointHandler: another handler already watches SIGTERM in this "
                                      "process; close() it first (or give this one a termination_watcher_fn)")
      try:
        self._previous = signal.signal(signal.SIGTERM, self._on_sigterm)
        self._watching = True
      except ValueError:  # not the main thread
        _watching.release()
        raise FailedPreconditionError("PreemptionCheckpointHandler: SIGTERM can only be watched from the main thread; "
                                      "construct the handler there or give it a termination_watcher_fn") from None
    # Nothing is tracked or restored before the checks above passed; a
    # failed restore leaves the checkpoint as it was given.
    try:
      self._runs = Variable(np.zeros((), np.int64), name=RUN_CALLS_NAME)
      checkpoint.track(RUN_CALLS_NAME, self._runs)
      try:
        latest = latest_checkpoint(self._dir, strategy=self._strategy)
        if latest is not None:
          checkpoint.restore(latest)
      except BaseException:
        checkpoint._tracked.pop()
        raise
    except BaseException:
      self.close()
      raise
    self._total = int(np.asarray(self._runs.value()))
    self.restored_from = latest

  def _on_sigterm(self, signum, frame):
    self._signalled = True

  @property
  def total_run_calls(self):
    """Calls of run() so far, those of the run that saved the restored
    checkpoint included (TF's total_run_calls)."""
    return self._total

  def run(self, distributed_train_function, *args, **kwargs):
    """Calls distributed_train_function(*args, **kwargs) (a whole step, which
    itself calls strategy.run), counts the call, then
    save_checkpoint_if_preempted(). Returns the function's result."""
    result = distributed_train_function(*args, **kwargs)
    self._total += 1
    self.save_checkpoint_if_preempted()
    return result

  def save_checkpoint_if_preempted(self):
    """If any worker was told to stop (with several workers, a one-element
    all_reduce among them, at the same call on every worker), every worker
    saves the checkpoint and calls the exit function."""
    from .strategy import get_replica_context
    _require_cross_replica("save_checkpoint_if_preempted")
    mine = bool(self._watcher()) if self._watcher is not None else self._signalled
    stop = mine
    if self._strategy._core.num_workers > 1:
      flag = np.array([1 if mine else 0], np.int32)
      with self._strategy.scope():
        sums = self._strategy.run(lambda: get_replica_context().all_reduce("sum", flag))
      stop = int(np.asarray(self._strategy.experimental_local_results(sums)[0])[0]) > 0
    if not stop:
      return
    self._signalled = False
    with self._strategy.scope():
      self._runs.assign(np.array(self._total, np.int64))
      self._checkpoint.save(self._dir)
    if self._exit is not None:
      self._exit()
      return
    self.close()
    sys.exit(_RESTART_CODE)

  def close(self):
    """Gives SIGTERM back its previous handler (idempotent)."""
    if self._watching:
      # (None: the previous handler was not installed from Python; the
      # default disposition is the closest Python can restore.)
      signal.signal(signal.SIGTERM, self._previous if self._previous is not None else signal.SIG_DFL)
      self._previous = None
      self._watching = False
      _watching.release()
