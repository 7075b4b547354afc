"""Data-parallel PyTorch training with distribute: a torch.nn MLP on the
handwritten digits shipped in data/, MirroredStrategy over N replicas.

Each replica runs the forward and backward pass of its slice of the global
batch on its own copy of the model, the gradients are all-reduced in place
through zero-copy views (the replica's .grad tensors themselves receive the
sums), and every replica applies the same SGD step, so the copies stay
identical. Each copy's .grad tensors are views of one flat block from
strategy.experimental_allocate_shared, summed by one call: under mpirun
(--strategy multi_worker, one process per worker on one host) the blocks
live in the host's shared memory, and from 64 KiB up (a larger model than
this one) they are summed without a copy between the processes.

  /usr/bin/python3 examples/python/torch_digits.py --replicas 2
  mpirun -np 2 /usr/bin/python3 examples/python/torch_digits.py --strategy multi_worker
"""
import argparse
import copy
import os
import pathlib

# One BLAS thread per replica: each replica is a thread already, and a
# threaded BLAS splits its sums differently with another replica count, so
# that 1 and N replicas would drift apart by rounding (set before numpy and
# torch load the BLAS).
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np
import torch

import distribute as dist

DATA = pathlib.Path(__file__).resolve().parents[2] / "data" / "digits.csv"


def load(seed):
  table = np.loadtxt(DATA, delimiter=",", dtype=np.float32)
  x, y = table[:, :64] / 16.0, table[:, 64].astype(np.int64)
  order = np.random.default_rng(seed).permutation(len(x))
  cut = int(0.8 * len(x))
  return (x[order[:cut]], y[order[:cut]]), (x[order[cut:]], y[order[cut:]])


def make_model(seed):
  torch.manual_seed(seed)
  return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))


def train(strategy, epochs=15, batch_size=64, lr=0.1, seed=0, threads_per_replica=1):
  torch.set_num_threads(threads_per_replica)
  (x, y), (xt, yt) = load(seed)
  base = make_model(seed)
  n = strategy._core.num_local_replicas
  models = [copy.deepcopy(base) for _ in range(n)]  # one copy per local replica
  # One flat gradient block per local replica; each .grad a view of its
  # piece (backward accumulates into it in place).
  blocks = strategy.experimental_allocate_shared(sum(p.numel() for p in base.parameters()))
  for model, block in zip(models, blocks):
    flat, offset = torch.from_numpy(block), 0
    for p in model.parameters():
      p.grad = flat[offset:offset + p.numel()].view_as(p)
      offset += p.numel()
  dataset = dist.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x), seed=seed).batch(batch_size)
  dds = strategy.experimental_distribute_dataset(dataset)
  loss_fn = torch.nn.CrossEntropyLoss(reduction="sum")

  def step(xb, yb):
    ctx = dist.get_replica_context()
    local = ctx.replica_id_in_sync_group - strategy._core.worker_index * n
    model = models[local]
    # The replica's slice as torch tensors without a copy (read only here).
    xb = torch.from_dlpack(xb) if len(xb) else torch.zeros((0, 64))
    yb = torch.from_dlpack(yb) if len(yb) else torch.zeros((0,), dtype=torch.int64)
    model.zero_grad(set_to_none=False)  # zeroed in place: the views stay
    loss = loss_fn(model(xb), yb) / batch_size if len(xb) else sum(p.sum() * 0 for p in model.parameters())
    loss.backward()
    ctx.all_reduce_in_place("sum", blocks[local])  # the .grad tensors receive the sums
    with torch.no_grad():
      for p in model.parameters():
        p -= lr * p.grad
    return np.float32(loss.item())

  for _ in range(epochs):
    for batch in dds:
      strategy.run(step, args=batch)
  model = models[0]
  with torch.no_grad():
    accuracy = float((model(torch.from_numpy(xt)).argmax(1).numpy() == yt).mean())
  return model, accuracy


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--strategy", choices=["mirrored", "multi_worker"], default="mirrored")
  parser.add_argument("--replicas", type=int, default=2)
  parser.add_argument("--epochs", type=int, default=15)
  args = parser.parse_args()
  devices = [f"CPU:{i}" for i in range(args.replicas)]
  strategy = (dist.MirroredStrategy(devices) if args.strategy == "mirrored"
              else dist.MultiWorkerMirroredStrategy(local_devices=devices))
  _, accuracy = train(strategy, epochs=args.epochs)
  if strategy._core.is_chief:
    print(f"test accuracy {accuracy:.4f}")


if __name__ == "__main__":
  main()
