"""One rank of a simulated multi-node job (tests/test_span.py): started once per rank as
``python span_job.py TAG --node N --local_rank R DIR`` (the tag and node in its command line are
what a stage's ``process.match`` finds, one host's ranks apart from another's).

It works while ``DIR/finish`` and ``DIR/hang`` are absent: local rank 0 of each node appends
a step line to ``DIR/node<N>.log`` and each rank burns a little CPU. With ``DIR/hang`` it
waits, as a rank blocked in a collective whose peer is gone does (no CPU, no log). With
``DIR/finish`` it ends: global rank 0 writes the outputs into ``DIR/out`` (shared storage),
each node's local rank 0 writes ``node N done`` to its log, and the rank exits 0.

With ``SPAN_RANK_LOGS=P`` (P ranks a node) each rank also writes a log of its own,
``DIR/rank<G>.log`` (G = N * P + R, its global rank): a step line as it works and ``rank G
done`` as it ends; with ``DIR/mute-rank<G>`` it ends without that line, and with
``DIR/error-rank<G>`` it writes ``ERROR rank G`` and exits 1 at once. Every rank but global rank
0 then leaves at a closing barrier: once rank 0 has written its lines (2 s at most).
"""

from __future__ import annotations

import os
import sys
import time


def main() -> int:
    _tag, _, node_s, _, rank_s, folder = sys.argv[1:7]
    node, rank = int(node_s), int(rank_s)
    log = os.path.join(folder, f"node{node}.log")
    per_node = int(os.environ.get("SPAN_RANK_LOGS", "0"))
    mine = os.path.join(folder, f"rank{node * per_node + rank}.log") if per_node else None
    step = 0
    while True:
        if os.path.exists(os.path.join(folder, "finish")):
            break
        if mine is not None and os.path.exists(os.path.join(folder, f"error-rank{node * per_node + rank}")):
            with open(mine, "a") as f:
                f.write(f"ERROR rank {node * per_node + rank}\n")
            return 1
        if os.path.exists(os.path.join(folder, "hang")):
            time.sleep(0.1)  # blocked in a collective: no CPU, no line in any log
            continue
        if mine is not None:
            with open(mine, "a") as f:
                f.write(f"step {step}\n")
        if rank == 0:
            with open(log, "a") as f:
                f.write(f"step {step}\n")
        step += 1
        end = time.process_time() + 0.01
        while time.process_time() < end:
            pass
        time.sleep(0.1)
    if node == 0 and rank == 0:
        out = os.path.join(folder, "out")
        os.makedirs(out, exist_ok=True)
        for k in range(2):
            with open(os.path.join(out, f"part-{k}.bin"), "wb") as f:
                f.write(b"x" * 64)
    if rank == 0 and node != 0:
        # A job's last barrier: the other nodes' "done" comes once global rank 0 has written
        # the shared outputs (2 s at most: a node 0 killed or hung does not hold it for good).
        # Without it a node's line could be found before the outputs it finishes on changed,
        # which no real job's collective end allows.
        until = time.monotonic() + 2.0
        while not os.path.exists(os.path.join(folder, "out", "part-1.bin")) and time.monotonic() < until:
            time.sleep(0.02)
    if rank == 0:
        with open(log, "a") as f:
            f.write(f"node {node} done\n")
    if mine is not None and not os.path.exists(os.path.join(folder, f"mute-rank{node * per_node + rank}")):
        with open(mine, "a") as f:
            f.write(f"rank {node * per_node + rank} done\n")
    chief = os.path.join(folder, "chief-done")
    if node == 0 and rank == 0:
        with open(chief, "w"):
            pass
    elif per_node:
        # The closing barrier (torch's destroy_process_group, a last all_reduce): a rank leaves
        # once the chief has written its lines (2 s at most, as above). Without it a worker could
        # exit while the chief still writes, which a test of "workers that end after the
        # chief's line" must not leave to the scheduler.
        until = time.monotonic() + 2.0
        while not os.path.exists(chief) and time.monotonic() < until:
            time.sleep(0.02)
    return 0


if __name__ == "__main__":
    sys.exit(main())
