"""`make run`'s console stays readable: routine sweeps are not logged, their findings are."""

import logging

from hermes_site.logfilters import QuietRoutineTasks


def record(level, message, *args):
    return logging.LogRecord("celery.app.trace", level, __file__, 1, message, args, None)


def test_routine_sweep_lines_are_dropped_and_everything_else_kept():
    quiet = QuietRoutineTasks()
    sweep = "chats.tasks.sweep_turns"
    assert not quiet.filter(record(logging.INFO, "Task %s[%s] received", sweep, "a1"))
    assert not quiet.filter(
        record(logging.INFO, "Scheduler: Sending due task sweep-turns (%s)", sweep)
    )
    assert quiet.filter(record(logging.INFO, "Task %s[%s] received", "chats.tasks.run_turn", "b2"))
    assert quiet.filter(record(logging.ERROR, "Task %s[%s] raised unexpected", sweep, "c3"))


def test_the_filter_is_on_celerys_loggers_as_configured():
    for name in ("celery.beat", "celery.worker.strategy", "celery.app.trace"):
        assert any(isinstance(f, QuietRoutineTasks) for f in logging.getLogger(name).filters), name
