"""`python -m moto.server`, with moto's clock read the quick way: what tests/support/sqs_server.py starts.

moto's SQS works out every queue attribute on each SendMessage (to read one of
them), counting the queue's messages by comparing each one's times with the
clock, which moto reads through datetime arithmetic (about 14 µs a reading).
With a few thousand messages waiting that is hundreds of milliseconds a call,
and a crash test's backlog would take minutes to send. ``time.time()`` is the
same clock read directly; nothing else of moto changes.
"""

from __future__ import annotations

import time

import moto.core.utils
import moto.sqs.models
from moto.server import main

_unix_time = moto.core.utils.unix_time


def unix_time(dt=None) -> float:  # moto's signature
    return time.time() if dt is None else _unix_time(dt)


def unix_time_millis(dt=None) -> float:
    return unix_time(dt) * 1000.0


for module in (moto.core.utils, moto.sqs.models):
    module.unix_time, module.unix_time_millis = unix_time, unix_time_millis

if __name__ == "__main__":
    main()
