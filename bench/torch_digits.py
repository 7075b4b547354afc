#!/usr/bin/python3
"""PyTorch peer of distribute-train, for bench/run_train_peers.sh.

Trains the model distribute-train trains (tools/train/trainer.cc), on the same
task, with the same global batch:

  - data: data/digits.csv (64 pixels and a label per row, no header), pixels
    scaled by 1/16 to [0, 1]; a seeded permutation, its first 20 % (359 rows)
    for testing, the other 1438 for training. The permutation is numpy's, not
    libstdc++'s std::shuffle of mt19937_64, so the rows in each part differ
    from the library's, but the sizes and the task are the same.
  - model: 64-128-128-10 MLP, ReLU, softmax cross-entropy; Glorot-uniform
    kernels and zero biases, as the library (and Keras) start.
  - loss: per-example cross-entropies summed and divided by the GLOBAL batch
    size (also for the short last batch of an epoch), as the library does.
  - optimizer: SGD, momentum 0.9, learning rate 0.05 (torch's form
    v = m v + g, w -= lr v equals Keras's v = m v - lr g, w += v for a
    constant rate).
  - input: every epoch a fresh shuffle of the training rows cut into global
    batches of 256 (the last one 158 rows); in DDP mode rank r takes the r-th
    ceil(B/world) rows of each global batch, as the library's distributed
    dataset splits a batch across replicas, so the global batch stays 256.

Modes:
  single --threads N          one process, torch.set_num_threads(N)
  distribute --replicas N     one process, distribute's MirroredStrategy over
                              N replicas (threads, --threads torch threads in
                              all, default 1): each replica runs its piece of
                              the global batch (the split DDP mode uses) on
                              its own copy of the model, the gradients are
                              summed in place (all_reduce_in_place on the
                              .grad tensors), and every replica's optimizer
                              makes the same step (the Python package,
                              issue 13; PYTHONPATH=build/release/python)
  mwms                        one process per worker under mpirun
                              (mpirun -np W python3 bench/torch_digits.py mwms):
                              distribute's MultiWorkerMirroredStrategy with
                              one replica per process, the same step as
                              distribute mode, the gradients summed across
                              the processes (no GIL shared); with
                              --shared-grads the .grad tensors are views of
                              one block from experimental_allocate_shared,
                              summed in place without a copy between the
                              processes
  ddp --world-size W          W processes (torch.multiprocessing spawn),
                              DistributedDataParallel over gloo on 127.0.0.1,
                              --threads (default 1) threads per process

Only the epochs after --warmup-epochs are timed (no evaluation inside the
timed part). Prints one line

  RESULT mode=... threads=... world_size=... epochs=... warmup_epochs=...
         batch_size=256 samples=... seconds=... samples_per_second=...
         test_accuracy=... blas=...

where samples_per_second is the global samples trained in the timed epochs
over their wall time, and blas names the BLAS library the process mapped.
"""

import argparse
import os
import socket
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INPUTS, CLASSES, TEST_FRACTION = 64, 10, 0.2


def load_split(path, seed):
    table = np.loadtxt(path, delimiter=",", dtype=np.float64, ndmin=2)
    if table.shape[1] != INPUTS + 1:
        sys.exit(f"torch_digits: expected 65 columns in {path}, got {table.shape[1]}")
    x = (table[:, :INPUTS] / 16.0).astype(np.float32)
    y = table[:, INPUTS].astype(np.int64)
    n = len(y)
    order = np.random.default_rng(seed).permutation(n)
    test = int(n * TEST_FRACTION)
    return (torch.from_numpy(x[order[test:]]), torch.from_numpy(y[order[test:]]),
            torch.from_numpy(x[order[:test]]), torch.from_numpy(y[order[:test]]))


def make_model(hidden, seed):
    torch.manual_seed(seed)
    sizes = [INPUTS] + hidden + [CLASSES]
    layers = []
    for i in range(len(sizes) - 1):
        linear = nn.Linear(sizes[i], sizes[i + 1])
        nn.init.xavier_uniform_(linear.weight)  # Glorot uniform
        nn.init.zeros_(linear.bias)
        layers.append(linear)
        if i + 2 < len(sizes):
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def maybe_trace(args, model, x):
    """--trace: the model as a TorchScript graph (torch.jit.trace), whose
    forward runs in C++ without holding the GIL."""
    return torch.jit.trace(model, x[:2]) if args.trace else model


def blas_in_use():
    """The BLAS/LAPACK shared objects this process has mapped."""
    names = set()
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1] if len(line.split()) >= 6 else ""
            base = os.path.basename(path)
            if "blas" in base or "lapack" in base or "mkl" in base:
                names.add(path)
    if any("openblas" in p for p in names):
        kind = "openblas"
        for p in names:
            for variant in ("openblas-openmp", "openblas-pthread", "openblas-serial"):
                if variant in p:
                    kind = variant
    elif any("/blas/" in p for p in names):
        kind = "reference"
    elif any("mkl" in p for p in names):
        kind = "mkl"
    elif any("blis" in p for p in names):
        kind = "blis"
    else:
        kind = "unknown"
    return kind, sorted(names)


def accuracy(model, x, y):
    with torch.no_grad():
        return (model(x).argmax(dim=1) == y).float().mean().item()


def train(args, rank, world_size, model, train_x, train_y):
    """Runs warm-up plus timed epochs; returns (timed samples, seconds, last epoch's mean loss)."""
    optimizer = torch.optim.SGD(model.parameters(), lr=args.learning_rate, momentum=args.momentum)
    loss_fn = nn.CrossEntropyLoss(reduction="sum")
    # DDP averages the ranks' gradients: scale each rank's loss sum by
    # world / G so that the average is the gradient of (global loss sum) / G.
    scale = world_size / args.batch_size
    n = train_x.shape[0]
    g = args.batch_size
    samples = 0
    start = None
    loss_sum = examples = 0.0
    for epoch in range(args.warmup_epochs + args.epochs):
        if epoch == args.warmup_epochs:
            if world_size > 1:
                dist.barrier()
            start = time.perf_counter()
        generator = torch.Generator().manual_seed(args.seed * 1000003 + epoch)
        order = torch.randperm(n, generator=generator)
        loss_sum = examples = 0.0
        for b in range(0, n, g):
            batch = order[b:b + g]
            piece = -(-batch.shape[0] // world_size) if world_size > 1 else batch.shape[0]
            mine = batch[rank * piece:(rank + 1) * piece] if world_size > 1 else batch
            x = train_x.index_select(0, mine)
            y = train_y.index_select(0, mine)
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(x), y)
            (loss * scale).backward()
            optimizer.step()
            loss_sum += loss.item()
            examples += mine.shape[0]
            if epoch >= args.warmup_epochs:
                samples += batch.shape[0]  # global samples of the step
    if world_size > 1:
        dist.barrier()
    seconds = time.perf_counter() - start
    if world_size > 1:  # the last epoch's loss over the whole global data
        sums = torch.tensor([loss_sum, examples], dtype=torch.float64)
        dist.all_reduce(sums)
        loss_sum, examples = sums.tolist()
    return samples, seconds, loss_sum / max(examples, 1)


def report(args, mode, world_size, samples, seconds, test_accuracy, loss):
    kind, _ = blas_in_use()
    print(f"RESULT mode={mode} threads={args.threads} world_size={world_size} epochs={args.epochs} "
          f"warmup_epochs={args.warmup_epochs} batch_size={args.batch_size} samples={samples} "
          f"seconds={seconds:.4f} samples_per_second={samples / seconds:.0f} "
          f"train_loss={loss:.4f} test_accuracy={test_accuracy:.4f} blas={kind} torch={torch.__version__}",
          flush=True)


def run_single(args):
    torch.set_num_threads(args.threads)
    train_x, train_y, test_x, test_y = load_split(args.data, args.seed)
    model = maybe_trace(args, make_model(args.hidden, args.seed), train_x)
    samples, seconds, loss = train(args, 0, 1, model, train_x, train_y)
    report(args, "single", 1, samples, seconds, accuracy(model, test_x, test_y), loss)


class StepClock:
  """Where a replica's step time goes (--profile): wall time, the thread's
  own CPU time, and the wall and CPU time inside the gradient all_reduce.
  Wall time a thread spends neither computing nor in the all_reduce is
  time it waited for the GIL (or was descheduled)."""

  def __init__(self):
    self.wall = self.cpu = self.reduce_wall = self.reduce_cpu = 0.0
    self.forward = self.backward = self.optimizer = 0.0  # wall time of each phase
    self.steps = 0

  def report(self, label):
    if self.steps == 0:
      return
    idle = self.wall - self.cpu
    reduce_idle = self.reduce_wall - self.reduce_cpu
    print(f"PROFILE {label} steps={self.steps} step_us={self.wall / self.steps * 1e6:.0f} "
          f"cpu={self.cpu / self.wall:.1%} all_reduce_wall={self.reduce_wall / self.wall:.1%} "
          f"waiting_outside_all_reduce={(idle - reduce_idle) / self.wall:.1%} "
          f"forward_us={self.forward / self.steps * 1e6:.0f} backward_us={self.backward / self.steps * 1e6:.0f} "
          f"all_reduce_us={self.reduce_wall / self.steps * 1e6:.0f} "
          f"optimizer_us={self.optimizer / self.steps * 1e6:.0f}", flush=True)


def make_step(models, optimizers, loss_fn, train_x, train_y, g, n_rep, losses, clocks, flat=None):
  """flat: one replica's gradients as views of one array (the mwms mode's
  --shared-grads): zeroed in place, summed with one in-place call."""
  import distribute

  def step(batch):
    ctx = distribute.get_replica_context()
    r = ctx.replica_id_in_sync_group
    local = r % len(models)
    clock = clocks[local] if clocks else None
    if clock:
      wall0, cpu0 = time.perf_counter(), time.thread_time()
    piece = -(-batch.shape[0] // n_rep)
    mine = batch[r * piece:(r + 1) * piece]
    model, optimizer = models[local], optimizers[local]
    optimizer.zero_grad(set_to_none=flat is None)
    if clock:
      f0 = time.perf_counter()
    loss = loss_fn(model(train_x.index_select(0, mine)), train_y.index_select(0, mine))
    if clock:
      b0 = time.perf_counter()
      clock.forward += b0 - f0
    (loss / g).backward()
    if clock:
      rw0, rc0 = time.perf_counter(), time.thread_time()
      clock.backward += rw0 - b0
    if flat is None:
      ctx.all_reduce_in_place("sum", [p.grad for p in model.parameters()])
    else:
      ctx.all_reduce_in_place("sum", flat)
    if clock:
      clock.reduce_wall += time.perf_counter() - rw0
      clock.reduce_cpu += time.thread_time() - rc0
      o0 = time.perf_counter()
    optimizer.step()
    if clock:
      clock.optimizer += time.perf_counter() - o0
    losses[local] += loss.item()
    if clock:
      clock.wall += time.perf_counter() - wall0
      clock.cpu += time.thread_time() - cpu0
      clock.steps += 1

  return step


def run_mwms(args):
    import distribute
    torch.set_num_threads(args.threads)
    train_x, train_y, test_x, test_y = load_split(args.data, args.seed)
    strategy = distribute.MultiWorkerMirroredStrategy()
    world = strategy.num_replicas_in_sync
    rank = strategy._core.worker_index
    model = maybe_trace(args, make_model(args.hidden, args.seed), train_x)  # the same seed on every worker: the same start
    optimizer = torch.optim.SGD(model.parameters(), lr=args.learning_rate, momentum=args.momentum)
    losses = [0.0]
    clocks = [StepClock()] if args.profile else None
    flat = None
    if args.shared_grads:
        # One block for every gradient (the host's shared memory, from
        # experimental_allocate_shared); each .grad a view of its piece:
        # backward accumulates into it in place, one in-place all_reduce
        # sums them all without a copy between the processes.
        parameters = list(model.parameters())
        flat = strategy.experimental_allocate_shared(sum(p.numel() for p in parameters))[0]
        flat_t = torch.from_numpy(flat)
        offset = 0
        for p in parameters:
            p.grad = flat_t[offset:offset + p.numel()].view_as(p)
            offset += p.numel()
    step = make_step([model], [optimizer], nn.CrossEntropyLoss(reduction="sum"), train_x, train_y,
                     args.batch_size, world, losses, clocks, flat)
    n = train_x.shape[0]
    samples = 0
    start = None
    for epoch in range(args.warmup_epochs + args.epochs):
        if epoch == args.warmup_epochs:
            strategy.run(lambda: distribute.get_replica_context().all_reduce("sum", np.zeros(1, np.float32)))
            start = time.perf_counter()
            if clocks:
                clocks[0] = StepClock()
        generator = torch.Generator().manual_seed(args.seed * 1000003 + epoch)
        order = torch.randperm(n, generator=generator)
        losses[0] = 0.0
        for b in range(0, n, args.batch_size):
            batch = order[b:b + args.batch_size]
            strategy.run(step, args=(batch,))
            if epoch >= args.warmup_epochs:
                samples += batch.shape[0]
    if flat is not None:
        # The gradients were still the block's views at the end (backward
        # accumulated in place, nothing replaced them).
        base, end = flat.ctypes.data, flat.ctypes.data + flat.nbytes
        assert all(base <= p.grad.data_ptr() < end for p in model.parameters()), "a .grad left the shared block"
    # Every worker waits for the slowest here: its time is the job's.
    total = strategy.run(lambda: distribute.get_replica_context().all_reduce(
        "sum", np.array([losses[0]], np.float64)))
    seconds = time.perf_counter() - start
    if clocks:
        clocks[0].report(f"worker {rank}")
    if rank == 0:
        report(args, "mwms", world, samples, seconds, accuracy(model, test_x, test_y),
               float(np.asarray(total)[0]) / n)


def run_distribute(args):
    import copy
    import distribute
    torch.set_num_threads(args.threads)
    train_x, train_y, test_x, test_y = load_split(args.data, args.seed)
    strategy = distribute.MirroredStrategy([f"CPU:{i}" for i in range(args.replicas)])
    n_rep = args.replicas
    base = make_model(args.hidden, args.seed)
    models = [maybe_trace(args, copy.deepcopy(base), train_x) for _ in range(n_rep)]
    optimizers = [torch.optim.SGD(m.parameters(), lr=args.learning_rate, momentum=args.momentum) for m in models]
    loss_fn = nn.CrossEntropyLoss(reduction="sum")
    g = args.batch_size
    n = train_x.shape[0]
    losses = [0.0] * n_rep
    clocks = [StepClock() for _ in range(n_rep)] if args.profile else None
    step = make_step(models, optimizers, loss_fn, train_x, train_y, g, n_rep, losses, clocks)

    samples = 0
    start = None
    for epoch in range(args.warmup_epochs + args.epochs):
        if epoch == args.warmup_epochs:
            start = time.perf_counter()
            if clocks:
                clocks[:] = [StepClock() for _ in range(n_rep)]
        generator = torch.Generator().manual_seed(args.seed * 1000003 + epoch)
        order = torch.randperm(n, generator=generator)
        losses[:] = [0.0] * n_rep
        for b in range(0, n, g):
            batch = order[b:b + g]
            strategy.run(step, args=(batch,))
            if epoch >= args.warmup_epochs:
                samples += batch.shape[0]
    seconds = time.perf_counter() - start
    if clocks:
        for r, clock in enumerate(clocks):
            clock.report(f"replica {r}")
    report(args, "distribute", n_rep, samples, seconds, accuracy(models[0], test_x, test_y), sum(losses) / n)


def ddp_worker(rank, args, port):
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=args.world_size)
    train_x, train_y, test_x, test_y = load_split(args.data, args.seed)
    # Same seed on every rank; DDP also broadcasts rank 0's parameters.
    model = nn.parallel.DistributedDataParallel(maybe_trace(args, make_model(args.hidden, args.seed), train_x))
    samples, seconds, loss = train(args, rank, args.world_size, model, train_x, train_y)
    # The slowest rank's time is the step time; take the maximum.
    t = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    if rank == 0:
        report(args, "ddp", args.world_size, samples, t.item(),
               accuracy(model.module, test_x, test_y), loss)
    dist.destroy_process_group()


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("mode", choices=["single", "ddp", "distribute", "mwms"])
    parser.add_argument("--replicas", type=int, default=2, help="distribute mode: replicas (threads)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads per process (default: 1 for ddp, all cores for single)")
    parser.add_argument("--world-size", type=int, default=2, help="ddp processes")
    parser.add_argument("--epochs", type=int, default=30, help="timed epochs")
    parser.add_argument("--warmup-epochs", type=int, default=1, help="untimed epochs before them")
    parser.add_argument("--batch-size", type=int, default=256, help="global batch size")
    parser.add_argument("--learning-rate", type=float, default=0.05)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--hidden", type=lambda s: [int(v) for v in s.split(",")], default=[128, 128])
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--data", default=os.path.join(ROOT, "data", "digits.csv"))
    parser.add_argument("--shared-grads", action="store_true",
                        help="mwms mode: the gradients as views of one block from experimental_allocate_shared, "
                             "summed in place by one call")
    parser.add_argument("--profile", action="store_true",
                        help="distribute and mwms modes: print where each replica's step time goes")
    parser.add_argument("--trace", action="store_true",
                        help="every mode: run the model as a TorchScript trace (torch.jit.trace)")
    parser.add_argument("--show-blas", action="store_true",
                        help="print the BLAS this process maps after importing torch, and exit")
    args = parser.parse_args()
    if args.show_blas:
        torch.ones(2, 2) @ torch.ones(2, 2)
        kind, paths = blas_in_use()
        print(f"BLAS {kind} " + " ".join(paths))
        return
    if args.epochs < 1 or args.warmup_epochs < 0 or args.batch_size < 1 or args.world_size < 1:
        parser.error("--epochs, --batch-size and --world-size must be >= 1, --warmup-epochs >= 0")
    if args.threads is None:
        args.threads = 1 if args.mode in ("ddp", "distribute", "mwms") else (os.cpu_count() or 1)
    if args.mode == "single":
        run_single(args)
    elif args.mode == "distribute":
        run_distribute(args)
    elif args.mode == "mwms":
        run_mwms(args)
    else:
        mp.spawn(ddp_worker, args=(args, free_port()), nprocs=args.world_size, join=True)


if __name__ == "__main__":
    main()
