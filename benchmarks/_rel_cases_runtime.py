"""bench_reliability cases, classes 4-7: Scheduler options, plan files, environment
values, Scheduler failures that must not be silent."""
from __future__ import annotations

import copy
import json
import warnings


import _rel_common as rel
from _rel_common import MiB, api_outcome, case, cli_outcome, host
from _reliability import run_cli


# ---- 4. Scheduler options ---------------------------------------------------------------------
def _sched_case(kw):
    def run():
        from uvm_sched.runtime import Scheduler

        with host():
            try:
                s = Scheduler(hook=False, **kw)
            except (TypeError, ValueError):
                return "clear error"
            except Exception:  # noqa: BLE001
                return "crash"
            # accepted: does training survive it? (the bug: a TypeError at the 4th step)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    with s:
                        _loop(s, 6)
            except Exception:  # noqa: BLE001
                return "crash"
            return "wrong"
    return run


def _loop(s, iters, layers=4, act=2 * MiB):
    from uvm_sched import native

    weights = [native.malloc(4 * MiB) for _ in range(layers)]
    for _ in range(iters):
        s.step()
        acts = [native.malloc(act) for _ in range(layers)]
        for a in reversed(acts):
            native.free(a)
    for w in weights:
        native.free(w)


for _kw in [dict(plan_opts={"bogus": 1}), dict(plan_opts={"pattern": None}),
            dict(plan_opts={"guard": -1}), dict(plan_opts={"rounds": 0}),
            dict(plan_opts={"discard": "yes"}), dict(budget="lots"), dict(budget="inf"),
            dict(budget=-5), dict(hw="no-such-gpu"), dict(warmup_iters=2.5),
            dict(relearn_after="2"), dict(hook="sometimes"), dict(mode="psychic")]:
    case("4 Scheduler options", repr(_kw))(_sched_case(_kw))


def _sched_ok():
    from uvm_sched.runtime import Scheduler

    with host():
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with Scheduler(budget="90%", warmup_iters=2, hook=False) as s:
                _loop(s, 6)
                return "accepted" if s.state == "armed" else "wrong"


case("4 Scheduler options", "budget='90%', warmup_iters=2 (valid)")(_sched_ok)


# ---- 5. plan files ---------------------------------------------------------------------------
PLAN_EDITS = [("meta", "period_events", 2**29), ("meta", "period_events", 0),
              ("meta", "budget_bytes", -5), ("meta", "budget_bytes", "abc"),
              ("meta", "budget_bytes", 1e30), ("meta", "sync", "bogus"),
              ("meta", "mode", "clairvoyant"), ("meta", "alloc_sizes", [-1]),
              ("meta", "version", -5), ("row", "offset", -7), ("row", "bytes", -1),
              ("row", "block", -3), ("row", "tick", "x"), ("row", "persistent", "yes"),
              ("drop", "actions", None), ("drop", "meta", None), ("drop", "columns", None)]


def _plan_case(where, key, value):
    def run():
        from uvm_sched.planner import Plan, PlanError

        d = copy.deepcopy(rel.IN.plan_doc)
        if where == "meta":
            d["meta"][key] = value
        elif where == "row":
            d["actions"][0][d["columns"].index(key)] = value
        else:
            d.pop(key)
        p = rel.IN.fresh("plan") / "q.json"
        p.write_text(json.dumps(d))
        api = api_outcome(lambda: Plan.load(p), (PlanError,))
        cli = cli_outcome(["simulate", rel.IN.trace, "--plan", p, "-q"])
        order = {"crash": 0, "data loss": 1, "wrong": 2, "hang": 3, "clear error": 4}
        return min(api, cli, key=order.get)
    return run


for _w, _k, _v in PLAN_EDITS:
    case("5 plan files trusted", f"{_w} {_k} = {_v!r}" if _w != "drop" else f"no {_k!r}")(
        _plan_case(_w, _k, _v))


def _other_trace(force):
    def run():
        code, _, err = run_cli("simulate", rel.IN.other, "--plan", rel.IN.plan, "-q",
                               *(["--force"] if force else []))
        if force:
            return "accepted" if code == 0 and "warning" in err else (
                "crash" if code == 1 else "wrong")
        return "clear error" if code == 2 else ("crash" if code == 1 else "wrong")
    return run


case("5 plan files trusted", "a plan for another trace")(_other_trace(False))
case("5 plan files trusted", "a plan for another trace, --force (valid: a warning)")(
    _other_trace(True))
case("5 plan files trusted", "the plan for this trace (valid)")(
    lambda: cli_outcome(["simulate", rel.IN.trace, "--plan", rel.IN.plan, "-q"], expect_ok=True))


# ---- 6. environment values -----------------------------------------------------------------
ENV_BAD = [("UVM_SCHED_LIMIT_BYTES", v) for v in ("1.5G", "32 M", "abc", "-1", "1e9",
                                                  "99999999999999999999")] + \
          [("UVM_SCHED_ARENA_BYTES", v) for v in ("2.5M", "8 MiB", "lots")] + \
          [("UVM_SCHED_RING_EVENTS", v) for v in ("1k5", "many")] + \
          [("UVM_SCHED_TRACE", v) for v in ("2", "enabled")] + \
          [("UVM_SCHED_VERBOSE", v) for v in ("3", "loud")]
ENV_GOOD = [("UVM_SCHED_LIMIT_BYTES", "16M", "limit_bytes", 16 << 20),
            ("UVM_SCHED_LIMIT_BYTES", "1G", "limit_bytes", 1 << 30),
            ("UVM_SCHED_LIMIT_BYTES", "16MiB", "limit_bytes", 16 << 20),
            ("UVM_SCHED_TRACE", "yes", "tracing", 1), ("UVM_SCHED_TRACE", "0", "tracing", 0),
            ("UVM_SCHED_RING_EVENTS", "4096", "ring_capacity", 4096)]


def _env_bad(var, value):
    def run():
        from uvm_sched import native

        try:
            with host(**{var: value}):
                native.malloc(64)
        except ValueError as e:
            return "clear error" if var in str(e) and value in str(e) else "wrong"
        except Exception:  # noqa: BLE001
            return "crash"
        return "wrong"
    return run


def _env_good(var, value, stat, want):
    def run():
        from uvm_sched import native

        with host(**{var: value}):
            return "accepted" if native.stats()[stat] == want else "wrong"
    return run


for _var, _val in ENV_BAD:
    case("6 environment values", f"{_var}={_val}")(_env_bad(_var, _val))
for _var, _val, _stat, _want in ENV_GOOD:
    case("6 environment values", f"{_var}={_val} (valid)")(_env_good(_var, _val, _stat, _want))


# ---- 7. Scheduler failures silent ---------------------------------------------------------
def _warns(env, kw, loop):
    def run():
        from uvm_sched.runtime import Scheduler

        with host(**env):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                with Scheduler(hook=False, **kw) as s:
                    loop(s)
            said = [w for w in caught if "uvm_sched" in str(w.message)]
            return "clear error" if len(said) == 1 else "wrong"
    return run


def _big_iteration(s):
    from uvm_sched import native

    for _ in range(4):
        s.step()
        blocks = [native.malloc(4096) for _ in range(1500)]
        for b in blocks:
            native.free(b)


case("7 Scheduler failures silent", "budget of 1 byte")(
    _warns({}, dict(budget=1, warmup_iters=1), lambda s: _loop(s, 8)))
case("7 Scheduler failures silent", "ring of 1,024 records, 3,000 events per iteration")(
    _warns({"UVM_SCHED_RING_EVENTS": "1024"}, dict(budget="60%", warmup_iters=2), _big_iteration))
case("7 Scheduler failures silent", "UVM_SCHED_TRACE=0")(
    _warns({"UVM_SCHED_TRACE": "0"}, dict(budget="60%", warmup_iters=1), lambda s: _loop(s, 4)))


def _strict():
    from uvm_sched.runtime import Scheduler

    with host():
        s = Scheduler(budget=1, warmup_iters=1, hook=False, strict=True).start()
        try:
            _loop(s, 4)
        except RuntimeError:
            return "clear error"
        return "wrong"


case("7 Scheduler failures silent", "budget of 1 byte, strict=True")(_strict)
