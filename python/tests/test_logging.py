"""sluice.LoggingHandler: log records as events, read back from a real server."""

from __future__ import annotations

import logging

import sluice
from conftest import Server, wait_for


def test_records_become_events(shared_server: Server):
    em = sluice.Emitter(http=shared_server.url)
    handler = sluice.LoggingHandler(em, type="PYLOG", subtype=lambda r: r.levelname)
    log = logging.getLogger("app.test")
    log.setLevel(logging.DEBUG)
    log.addHandler(handler)
    try:
        log.info("hello %s", "world", extra={"user": "u1", "obj": object(), "n": {"k": [1, (2, 3)]}})
        try:
            1 / 0
        except ZeroDivisionError:
            log.exception("it broke")
        log.debug("quiet")
        logging.getLogger("sluice.emitter").warning("own warnings are not sent")
        handler.flush()
    finally:
        log.removeHandler(handler)
        em.close()
    evs = wait_for(lambda: (lambda e: e if len(e) >= 3 else None)(shared_server.events(type="PYLOG")), 60, "log events")
    assert len(evs) == 3
    by = {e["message"]: e for e in evs}
    info = by["hello world"]
    assert info["subtype"] == "INFO" and info["level"] == "INFO" and info["logger"] == "app.test"
    assert info["user"] == "u1" and info["obj"].startswith("<object object") and info["n"] == {"k": [1, [2, 3]]}
    assert info["func"] == "test_records_become_events" and info["line"] > 0 and info["epoch"] == int(info["time"])
    err = by["it broke"]
    assert err["subtype"] == "ERROR" and "ZeroDivisionError" in err["exc"]
    assert by["quiet"]["subtype"] == "DEBUG"


def test_handler_owning_its_emitter(shared_server: Server):
    handler = sluice.LoggingHandler(udp=shared_server.udp, type="PYLOG2")
    log = logging.getLogger("app.owned")
    log.addHandler(handler)
    log.propagate = False
    try:
        log.warning("via udp")
    finally:
        log.removeHandler(handler)
        handler.close()  # flushes and closes the emitter it made
    assert handler.emitter.stats()["sent"] == 1
    evs = wait_for(lambda: shared_server.events(type="PYLOG2"), 60, "the udp log event")
    assert evs[0]["message"] == "via udp" and evs[0]["subtype"] == ""


def test_bad_format_args_do_not_raise(shared_server: Server, capsys):
    handler = sluice.LoggingHandler(udp=shared_server.udp)
    log = logging.getLogger("app.bad")
    log.addHandler(handler)
    log.propagate = False
    try:
        log.error("%d", "not a number")  # logging's own error path (printed), never raised
    finally:
        log.removeHandler(handler)
        handler.close()
    assert "Logging error" in capsys.readouterr().err
