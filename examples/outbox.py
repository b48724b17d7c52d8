"""Perform each side effect once across crashes: the sealed ledger as an outbox.

Run: ``python examples/outbox.py STORE RECEIVER STEPS [CRASH_AT]``. Each step
appends its effect to the ledger and checkpoints (which seals the ledger)
*before* performing it; the effect carries the idempotency key
``RUN:SEQ``, which the receiver dedupes on. On start, every effect of the
sealed ledger is delivered again (the outbox flush): one cut off by a crash is
delivered now, one already delivered is dropped by the receiver. ``CRASH_AT``
kills the process (``os._exit``) after that step's checkpoint and before its
delivery, the worst moment. Whatever the crashes, RECEIVER ends with each
step's effect exactly once (docs/effects.md).
"""

from __future__ import annotations

import os
import sys

import cpstore

RUN = "outbox-demo"


def deliver(receiver: str, key: str, payload: bytes) -> None:
    """The receiving system: it performs an effect once per key (idempotent receiver)."""
    done = set()
    if os.path.exists(receiver):
        with open(receiver, encoding="utf-8") as f:
            done = {line.split("\t", 1)[0] for line in f}
    if key in done:
        return
    with open(receiver, "a", encoding="utf-8") as f:
        f.write(f"{key}\t{payload.decode()}\n")
        f.flush()
        os.fsync(f.fileno())


def flush_outbox(store: cpstore.Store, receiver: str) -> int:
    """Deliver every effect of the head's sealed ledger; returns the next step to run."""
    if store.ref(RUN) is None:
        return 0
    with store.latest(RUN) as cp:
        for seq, _target, _digest in cp.effects():
            deliver(receiver, f"{RUN}:{seq}", cp.effect_payload(seq))
        return cp.manifest.step + 1


def main(store_path: str, receiver: str, steps: int, crash_at: int | None) -> None:
    with cpstore.open(store_path) as store:
        step = flush_outbox(store, receiver)
        rec = store.recorder(RUN)
        while step < steps:
            payload = f"mail for step {step}".encode()
            seq = rec.effect("mail.send", payload)  # 1. into the ledger (the outbox)
            rec.checkpoint(step, {"step": step})  # 2. sealed and durable
            if step == crash_at:
                os._exit(3)  # a crash between the checkpoint and the effect
            deliver(receiver, f"{RUN}:{seq}", payload)  # 3. performed, keyed
            step += 1


if __name__ == "__main__":
    crash = int(sys.argv[4]) if len(sys.argv) > 4 else None
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), crash)
