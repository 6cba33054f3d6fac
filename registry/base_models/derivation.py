"""Deriving a base's module table, in processes of their own: the registry never imports torch.

One warm process per registry imports torch and transformers once (multiprocessing's fork server,
started at the first derivation and stopped with the registry). Each derivation runs in a process
forked from it, which bounds its own memory and CPU time (skeleton.answer) and is killed when it
runs past its time: a config that hangs or exhausts one derivation leaves the next untouched, and
a warm process that died is started again by the next. Importing torch costs seconds; a fork, a
few milliseconds.

The warm process takes requests on a socket file only this user can open (Python 3.11.1 and later:
before, an abstract socket any local user could reach). Nothing it answers is unpickled here: a
derivation's answer is JSON bytes, read with a bound.
"""

from __future__ import annotations

import json
import multiprocessing
import resource
import signal
import threading

from registry.base_models.module_table import ModuleTable
from registry.errors import Unavailable, Unprocessable

DERIVE_TIMEOUT_S = 60  # a build takes well under a second; the first derivation also warms up
MAX_OUTPUT_BYTES = 4 * 1024**2
MAX_CONFIG_BYTES = 256 * 1024
# The memory a derivation is allowed (skeleton.MEMORY_BYTES, which the registry cannot import).
DERIVATION_MEMORY_BYTES = 4 * 1024**3

PROCESSES = multiprocessing.get_context("forkserver")
# multiprocessing's bookkeeping of its children is not thread-safe: starting one polls the others,
# and two threads reaping one child could both read its exit. One thread at a time starts or reaps.
CHILDREN = threading.Lock()
FAILED_HINT = ("Check that torch and transformers are installed beside the registry, and the "
               "registry's memory.")
# The main module first, so that a derivation never imports it again; then the skeleton, and
# with it torch and transformers.
PROCESSES.set_forkserver_preload(["__main__", "registry.base_models.skeleton"])


def derive(config: dict, *, timeout_s: float = DERIVE_TIMEOUT_S) -> ModuleTable:
    """The table of the base this config.json describes; Unprocessable when the installed
    transformers cannot build it, with the reason and its version."""
    text = json.dumps(config)
    if len(text) > MAX_CONFIG_BYTES:
        raise Unprocessable(f"config.json is {len(text)} bytes; at most {MAX_CONFIG_BYTES} are accepted",
                            code="invalid_base_config", hint="Send the model's config.json as it was saved.")
    answer = _answer(_run(text.encode(), timeout_s))
    if "out_of_memory" in answer:
        raise _out_of_memory(answer["out_of_memory"])
    if "error" in answer:
        raise Unprocessable(
            f"transformers {answer.get('transformers', '?')} cannot build this base: {answer['error']}",
            code="unsupported_architecture",
            hint="Send the config.json the model was saved with; a newer architecture may need a newer "
                 "transformers on the registry.")
    return ModuleTable.from_json(answer)


def _run(config_text: bytes, timeout_s: float) -> bytes:
    """The derivation process's answer, read within the time and size bounds."""
    receiving, sending = PROCESSES.Pipe(duplex=False)
    process = PROCESSES.Process(target=_derive_here, args=(sending, config_text), name="module-table",
                                daemon=True)
    try:
        _start(process, sending)
        if not receiving.poll(timeout_s):
            raise Unprocessable(f"building the model from config.json took over {timeout_s:g} s",
                                code="invalid_base_config",
                                hint="Check num_hidden_layers and the other sizes in config.json.")
        return _receive(receiving, process)
    finally:
        receiving.close()
        with CHILDREN:
            if process.is_alive():
                process.kill()
            if process.pid is not None:
                process.join()
                process.close()


def _start(process, sending) -> None:
    try:
        with CHILDREN:
            process.start()
    except (OSError, EOFError) as failed:  # the warm process died starting, or could not fork
        limit = _address_space_limit()
        if limit is not None and limit < DERIVATION_MEMORY_BYTES:
            raise _out_of_memory({"limit_bytes": limit, "needed_bytes": DERIVATION_MEMORY_BYTES,
                                  "while": f"starting its process ({failed or type(failed).__name__})"}) from None
        raise Unavailable(f"deriving the module table failed: its process could not start ({failed})",
                          code="derivation_failed", hint=FAILED_HINT) from None
    finally:
        sending.close()  # the child holds its own end: a child that dies reads as the end of input


def _receive(receiving, process) -> bytes:
    try:
        return receiving.recv_bytes(MAX_OUTPUT_BYTES)
    except OSError:  # longer than MAX_OUTPUT_BYTES
        raise Unprocessable("the base's module table is too large", code="invalid_base_config") from None
    except EOFError:  # it died without answering: killed by its limits, or no torch to import
        with CHILDREN:
            process.join()
        raise Unavailable(f"deriving the module table failed: its process {_ended(process.exitcode)}",
                          code="derivation_failed", hint=FAILED_HINT) from None


def _derive_here(sending, config_text: bytes) -> None:
    """In the forked process: the skeleton is imported already, unless the warm process could not
    (under an address-space limit too low for torch, the import fails here, and says so)."""
    try:
        from registry.base_models import skeleton
    except (MemoryError, ImportError, OSError) as error:
        limit = _address_space_limit()
        if limit is None:
            raise
        sending.send_bytes(json.dumps({"out_of_memory": {
            "limit_bytes": limit, "needed_bytes": DERIVATION_MEMORY_BYTES,
            "while": f"importing torch and transformers ({type(error).__name__})"}}).encode())
        return
    skeleton.answer(sending, config_text)


def _address_space_limit() -> int | None:
    limit = resource.getrlimit(resource.RLIMIT_AS)[0]
    return None if limit == resource.RLIM_INFINITY else limit


def _out_of_memory(report: dict) -> Unavailable:
    gib = 1024**3
    limit, needed = report.get("limit_bytes", 0) / gib, report.get("needed_bytes", 0) / gib
    during = f" while {report['while']}" if report.get("while") else ""
    return Unavailable(
        f"deriving the module table ran out of memory{during}: the registry runs under an "
        f"address-space limit of {limit:.1f} GiB, and a derivation may use up to {needed:.1f} GiB",
        code="derivation_failed",
        hint=f"Raise the registry's address-space limit (ulimit -v, or the container's memory) to at "
             f"least {needed:.0f} GiB; a stored table of an older format still serves meanwhile.")


def _answer(raw: bytes) -> dict:
    try:
        answer = json.loads(raw)
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        raise Unavailable("deriving the module table failed: its process answered no table",
                          code="derivation_failed")
    return answer


def _ended(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        return f"was killed by signal {-exitcode} ({signal.strsignal(-exitcode)})"
    return f"exited with status {exitcode}"
