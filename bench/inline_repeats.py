"""How often a followed call (``Interpreter.inline``) repeats inputs the interpreter cannot tell apart, and what
its body did: the measurement behind function summaries (issue 27 item 1, docs/benchmarks.md).

Wraps ``FollowedCallsMixin.inline`` and, at each call, fingerprints its inputs: the callee node, the argument and
``self`` values (their whole reachable structure: types, fields, storages and versions, requires_grad, dtypes,
object attributes, with object identities and ids numbered by first appearance, so that two structurally equal
argument lists in different units agree), grad mode, the loop variables, the depth, whether it records, the
module.  A *repeat* is a call whose fingerprint an earlier call of the same file had (``unit``: of the same
analysed unit, ``file``: of any unit of the file).  For each call it also tells whether the body had *effects* beyond
its return value: anything added to the interpreter's records (events, findings, sinks, saves, sharing facts...),
a change to the arguments' structure (an attribute set, a version bumped), fresh ids handed out, grad mode left
changed.  An effect-free repeat could be answered by replaying the earlier result with no record to replay.
Not observed: names a callee rebinds in the module or a closure (``global``/``nonlocal``), objects reachable only
from those scopes, dict entries rebound at an existing key.  The effects are named (which record grew, ``self``
changed, the arguments changed, fresh values returned; an escape of values the inputs reach told apart from one of
values made inside), and a greedy table says which effects a summary would have to instantiate to replay how many of
the repeats with effects.  ``--reads`` also tracks which of the unit's records each call reads, and counts the
repeats on the same objects whose earlier call's records read are unchanged (a read-set key; slow).

``--replay`` runs a prototype of that replay instead (effect-free repeats of one unit, the very same input objects
unchanged, the unit's records unchanged since; the run log, steps, sequence numbers and ids advanced as the
callee would have) and compares it with the plain analysis, A B A B: CPU against ``ast.parse`` and the findings.

    python bench/inline_repeats.py [--reads | --replay] [--files-from FILE] [--limit N] FOLDER ...
"""

from __future__ import annotations

import argparse
import ast
import collections
import dataclasses
import enum
import itertools
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))

from gradguard.api import analyze_source  # noqa: E402
from gradguard.config import Config  # noqa: E402
from gradguard.inference import calls, followed, interpreter, values  # noqa: E402



# Fields that say where a value came from (what messages name), not what it is: ``provenance=False`` leaves them
# out, the inputs a summary parametric in them would take for the same.
_PROVENANCE = frozenset({"origin", "label", "node", "bound_at", "custom_view", "inference_made", "path"})


class Fingerprint:
    """A structural fingerprint of values: object identities and interpreter ids numbered by first appearance
    (``identity``: kept as they are, so that two fingerprints agree only on the very same objects, unchanged)."""

    def __init__(self, limit: int = 20000, provenance: bool = True, identity: bool = False) -> None:
        self.provenance = provenance
        self.identity = identity
        self.objects: dict[int, int] = {}
        self.ids: dict[int, int] = {}
        self.seen_ids: set[int] = set()  # the interpreter ids met (storages, graphs): what the inputs reach
        self.budget = limit
        self.keep: list = []  # keep fingerprinted objects alive (ids stay unique while measuring)

    def of(self, value):
        self.budget -= 1
        if self.budget < 0:
            raise OverflowError
        kind = type(value)
        if kind in _ATOMS or isinstance(value, enum.Enum):
            return value
        if isinstance(value, ast.AST):
            return id(value) if self.provenance else "ast"
        if kind is frozenset:
            if all(type(v) is int for v in value):
                return ("ids", tuple(map(self.id_, sorted(value))))
            return ("fs", tuple(sorted(map(self.of, value), key=repr)))
        if kind is tuple or kind is list:
            return (kind is list, tuple(map(self.of, value)))
        if kind is dict:
            return ("dict", tuple((k if type(k) is str else self.of(k), self.of(v)) for k, v in value.items()))
        if kind is set:
            return ("set", tuple(sorted(map(self.of, value), key=repr)))
        key = id(value)
        number = self.objects.get(key)
        if number is not None:
            return ("ref", key if self.identity else number)
        self.objects[key] = len(self.objects)
        self.keep.append(value)
        names = _FIELDS.get(kind)
        if names is None:
            names = _FIELDS[kind] = (tuple(f.name for f in dataclasses.fields(value))
                                     if dataclasses.is_dataclass(value) else ())
        if not names:
            return (kind, id(value))
        out = [kind, key] if self.identity else [kind]
        for name in names:
            item = getattr(value, name)
            if name == "id" and type(item) is int:
                out.append(self.id_(item))
            elif name == "scope":  # a closure's scopes: by identity
                out.append(tuple(map(id, item or ())))
            elif not self.provenance and name in _PROVENANCE:
                out.append(None)
            else:
                out.append(self.of(item))
        return tuple(out)

    def id_(self, n: int) -> int:
        self.seen_ids.add(n)
        return n if self.identity else self.ids.setdefault(n, len(self.ids))


_ATOMS = frozenset({int, float, str, bool, bytes, type(None)})
_FIELDS: dict = {}


def records(interp) -> tuple:
    """The sizes of everything the interpreter records (the effects a replay would have to reproduce)."""
    out = []
    for name, item in vars(interp).items():
        if name in ("call_stack", "frame_sites", "caller_envs", "made_nodes", "returns", "steps", "loop_vars",
                    "scopes", "outer_names", "state", "followed", "presets", "container_reads"):
            continue
        if isinstance(item, (list, set, dict, frozenset, tuple)):
            out.append((name, len(item)))
        elif isinstance(item, (int, bool)) and name != "seq":
            out.append((name, item))
    log = interp.run_log
    out.append(("run_log.escaped", len(log.escaped)))
    out.append(("run_log.writes", len(log.writes)))
    out.append(("saves", interp.saves.last_id))
    return tuple(out)


STATS = collections.Counter()
STEPS = collections.Counter()
COST = collections.Counter()
BY_CALLEE = collections.Counter()
CHECK = collections.Counter()
OUTCOME: dict = {}  # (strict key, unit) -> what the first effect-free call returned (see ``_outcome``)
# repeats with effects (of the kinds in ``_TAXONOMY_KINDS``): the effects they had -> the steps a replay of them would
# skip; which effects a summary would have to instantiate (rename onto the new call) to replay how much
TAXONOMY: dict = collections.defaultdict(collections.Counter)
_TAXONOMY_KINDS = ("strict unit repeat", "loose file repeat")
PLACES_LAST: dict = {}  # (identity key, unit) -> the inputs' places at its latest call
PLACES_DIFFER = collections.Counter()  # the records whose places differ at a repeat on the same objects
REPEATED = collections.Counter()  # callee name -> steps of its strict file repeats
SEEN: dict = {}  # (kind, key) -> the units that made such a call
ALIVE: list = []
OPEN: list = []  # the categories of the measured calls running now, outermost first


def _key(fp: Fingerprint, self, fn, args, kwargs, self_value, record, scope, owner, module_path) -> tuple:
    return (id(fn), fp.of(list(args)), fp.of(dict(kwargs)), fp.of(self_value), self.state.grad_enabled,
            tuple(self.loop_vars), len(self.call_stack), self.inline_record and record, module_path,
            tuple(id(s) for s in scope or ()), id(owner), self.module_unit)


def measure_inline(original):
    def inline(self, fn, args, kwargs, node, self_value=None, record=True, scope=None, owner=None, max_depth=5,
               module_path=None, frame=None):
        if len(self.call_stack) >= max_depth or any(c.fn is fn for c in self.call_stack) or frame is not None:
            STATS["not measured (too deep, recursive, generator part)"] += 1
            return original(self, fn, args, kwargs, node, self_value, record, scope, owner, max_depth, module_path,
                            frame)
        where = (fn, args, kwargs, self_value, record, scope, owner, module_path)
        clock = time.process_time()
        try:
            fps = Fingerprint()
            strict = _key(fps, self, *where)
            COST["fingerprint nodes (strict key)"] += 20000 - fps.budget
            COST["strict key"] += time.process_time() - clock
            loose = _key(Fingerprint(provenance=False), self, *where)
            fpi = Fingerprint(identity=True)
            same = _key(fpi, self, *where)
            ALIVE.append(fpi.keep)  # the objects its key names by identity stay alive until the file is done
            settled = (same, world(self))
            placed = (same, places(self, fpi))
            fpa = Fingerprint()
            before_args = (fpa.of(list(args)), fpa.of(dict(kwargs)), fpa.of(self_value))
        except (OverflowError, RecursionError):
            strict = loose = same = settled = placed = before_args = None
        unit = id(self)
        kinds = set()
        if strict is not None:
            for kind, key in (("strict", strict), ("loose", loose), ("same objects", same),
                              ("same objects and records", settled), ("same objects and places", placed)):
                units = SEEN.setdefault((kind, key), set())
                if unit in units:
                    kinds.add(f"{kind} unit repeat")
                if units:
                    kinds.add(f"{kind} file repeat")
                units.add(unit)
        if TRACK_READS and strict is not None:
            start_world = world_by_name(self)
            prior = READ_SETS.get((same, unit))
            if prior is not None and all(start_world.get(n) == prior[1].get(n) for n in prior[0]):
                kinds.add("same objects and read records unit repeat")
            READING.append(set())
        if placed is not None and STAMPING:
            if EPOCH_LAST.get((placed, unit)) == EPOCH[0]:
                kinds.add("same objects and places, no value written since, unit repeat")
        if placed is not None:
            last = PLACES_LAST.get((same, unit))
            if last is not None and last != placed[1]:
                PLACES_DIFFER.update(a[0] for a, b in zip(last, placed[1]) if a != b)
            PLACES_LAST[(same, unit)] = placed[1]
        recs = records(self)
        escapes = (len(self.escaped), len(self.run_log.escaped))
        ids = next(values._ids)
        steps = self.steps
        grad = self.state.grad_enabled
        OPEN.append(kinds)
        try:
            result = original(self, fn, args, kwargs, node, self_value, record, scope, owner, max_depth,
                              module_path, frame)
        finally:
            OPEN.pop()
            if TRACK_READS and strict is not None:
                reads = READING.pop()
                if READING:
                    READING[-1] |= reads
        spent = self.steps - steps
        if placed is not None and STAMPING:
            EPOCH_LAST[(placed, unit)] = EPOCH[0]
        STATS["calls"] += 1
        BY_CALLEE[getattr(fn, "name", "<lambda>")] += 1
        if not OPEN:
            STEPS["outermost followed calls"] += spent
        if strict is None:
            STATS["inputs too large to fingerprint"] += 1
            return result
        effects = []
        after = records(self)
        if after != recs:
            was = dict(recs)
            effects.extend(f"record {name}" for name, size in after if was.get(name) != size)
            if strict is not None:  # escapes of what the inputs reach only: renamed onto a new call's inputs
                reached = fpi.objects
                if "record escaped" in effects and all(id(v) in reached for v in self.escaped[escapes[0]:]):
                    effects[effects.index("record escaped")] = "record escaped (inputs' values)"
                if "record run_log.escaped" in effects and fpi.seen_ids.issuperset(
                        list(self.run_log.escaped)[escapes[1]:]):
                    effects[effects.index("record run_log.escaped")] = "record run_log.escaped (inputs' storages)"
        try:
            fpb = Fingerprint()
            now = (fpb.of(list(args)), fpb.of(dict(kwargs)), fpb.of(self_value))
            if now[:2] != before_args[:2]:
                effects.append("arguments changed")
            if now[2] != before_args[2]:
                effects.append("self changed")
        except (OverflowError, RecursionError):
            effects.append("arguments too large")
        if next(values._ids) - ids - 1 and not _plain(result):
            effects.append("fresh values returned")
        if self.state.grad_enabled != grad:
            effects.append("grad mode")
        if not effects and not (_plain(result) or id(result) in fps.objects):
            effects.append("result neither plain nor one of the inputs")
        free = "effect-free" if not effects else "with effects"
        if TRACK_READS and not effects:
            READ_SETS.setdefault((same, unit), (frozenset(reads & start_world.keys()), start_world))
        outcome = (not effects, _outcome(result, fps))
        first = OUTCOME.setdefault((strict, unit), outcome)
        if first is not outcome and first[0]:
            CHECK["same outcome: a replay would be right" if first == outcome else
                  ("had effects this time" if not outcome[0] else "returned another value")] += 1
        for kind in ("strict unit repeat", "strict file repeat", "loose unit repeat", "loose file repeat",
                     "same objects unit repeat", "same objects and records unit repeat",
                     "same objects and read records unit repeat", "same objects and places unit repeat",
                     "same objects and places, no value written since, unit repeat"):
            if kind in kinds:
                STATS[f"{kind}, {free}"] += 1
                # the steps a replay would save: those of this call unless a call around it is replayed already
                if not any(kind in outer for outer in OPEN):
                    STEPS[f"{kind} (any effects)"] += spent
                    if kind == "strict file repeat":
                        REPEATED[_callee(fn, owner, kinds)] += spent
                if kind in _TAXONOMY_KINDS and effects and not any(f"{kind} taxed" in outer for outer in OPEN):
                    TAXONOMY[kind][tuple(sorted(effects))] += spent
                    kinds.add(f"{kind} taxed")
                if not effects and not any(f"{kind} free" in outer for outer in OPEN):
                    STEPS[f"{kind}, effect-free"] += spent
                    kinds.add(f"{kind} free")
        if not kinds & {"strict file repeat", "loose file repeat", "same objects file repeat",
                        "same objects and records file repeat"}:
            STATS[f"first, {free}" + (" (" + ", ".join(effects) + ")" if effects else "")] += 1
        return result

    return inline


def greedy_coverage(by_effects: collections.Counter, total_steps: int) -> list:
    """Effects taken one at a time, each the one whose handling makes replayable the most steps of repeats not
    replayable yet (a repeat is replayable once every one of its effects is handled)."""
    handled: set = set()
    out, covered = [], 0
    while True:
        gains = collections.Counter()
        for effects, steps in by_effects.items():
            missing = set(effects) - handled
            if len(missing) == 1:
                gains[missing.pop()] += steps
        if not gains:
            # no single effect opens more: take the most frequent of what is left
            left = collections.Counter()
            for effects, steps in by_effects.items():
                for name in set(effects) - handled:
                    left[name] += steps
            if not left:
                return out
            name, gained = left.most_common(1)[0][0], 0
        else:
            name, gained = gains.most_common(1)[0]
        handled.add(name)
        covered += gained
        out.append((name, gained, 100 * covered / (total_steps or 1)))


def _callee(fn, owner, kinds: set) -> str:
    name = getattr(fn, "name", "<lambda>")
    where = f"{owner.name}.{name}" if owner is not None else name
    return where + (" (also a unit repeat)" if "strict unit repeat" in kinds else " (other units only)")


def _outcome(result, fps: Fingerprint):
    """The result as a replay would give it: a plain value, or which of the inputs (numbered as the key numbers
    them)."""
    if _plain(result):
        return ("plain", result)
    return ("input", fps.objects.get(id(result)))


def _plain(value) -> bool:
    return isinstance(value, (values.Const, values.Opaque)) or value is None or value is values.NOT_TENSOR


# ---------------------------------------------------------------- the replay, as a prototype (``--replay``)
# Attributes ``inline`` saves and puts back, or that only grow by what the callee's own code adds again at each run
# (``followed``: the callee's names; ``container_reads``: ids of its index nodes): no effect of a call.
_RESTORED = frozenset({"state", "inline_record", "returns", "loop_vars", "scopes", "outer_names", "owner",
                       "self_value", "ctx", "grad_off_site", "call_stack", "frame_sites", "caller_envs",
                       "made_nodes", "steps", "seq", "followed", "container_reads", "run_log", "saves", "k"})


def world(interp) -> tuple:
    """Every other attribute of the interpreter, as identities and sizes: a call that leaves it equal changed no
    record (a list, set or dict grown, a flag or a value rebound); the replay's key holds it too (what the callee
    could read of the unit's records is the same)."""
    out = []
    for name, item in vars(interp).items():
        if name in _RESTORED:
            continue
        if isinstance(item, (list, set, frozenset, tuple)):
            out.append((id(item), len(item)))
        elif isinstance(item, dict):
            out.append((id(item), len(item), tuple(map(id, item.values())) if len(item) < 8 else None))
        elif isinstance(item, (int, bool, str)) or item is None:
            out.append(item)
        else:
            out.append(id(item))
    log = interp.run_log
    out.append((len(log.escaped), len(log.writes), interp.saves.last_id, len(interp.saves._kinds)))
    return tuple(out)


# ``--reads``: the records each call reads (attributes of the interpreter looked up while it runs), so that a repeat
# is told apart by the records its earlier call read, not by all of them (a key a summary's read set would give)
TRACK_READS = False
READING: list = []  # the names read by each measured call running now, innermost last
READ_SETS: dict = {}  # (identity key, unit) -> (records the first effect-free call read, the records then)


def world_by_name(interp) -> dict:
    """``world``, by record name."""
    out = {}
    for name, item in vars(interp).items():
        if name in _RESTORED:
            continue
        if isinstance(item, (list, set, frozenset, tuple)):
            out[name] = (id(item), len(item))
        elif isinstance(item, dict):
            out[name] = (id(item), len(item), tuple(map(id, item.values())) if len(item) < 8 else None)
        elif isinstance(item, (int, bool, str)) or item is None:
            out[name] = item
        else:
            out[name] = id(item)
    log = interp.run_log
    out["run_log"] = (len(log.escaped), len(log.writes))
    out["saves"] = (interp.saves.last_id, len(interp.saves._kinds))
    return out


# ``--stamps``: one counter bumped at each write of a field of a value made before (``values``' dataclasses; not their
# dicts' and lists' items): how often a values-only epoch would stay unchanged between two calls on the same objects
STAMPING = False
EPOCH = [0]
EPOCH_LAST: dict = {}  # (identity key, places) -> the counter when its latest call ended


def stamp_value_writes() -> None:
    """A field set again (already in the object's ``__dict__``) is a write; its first setting, construction."""
    global STAMPING
    STAMPING = True
    for cls in list(vars(values).values()):
        if not (isinstance(cls, type) and dataclasses.is_dataclass(cls) and cls.__module__ == values.__name__
                and not cls.__dataclass_params__.frozen):
            continue

        def written(self, name, value):
            if name in self.__dict__:
                EPOCH[0] += 1
            object.__setattr__(self, name, value)

        cls.__setattr__ = written


def _tracking_getattribute(self, name):
    if READING:
        READING[-1].add(name)
    return object.__getattribute__(self, name)


def places(interp, fp: Fingerprint) -> tuple:
    """The inputs' place in the unit's records: of each set or dict, which of the ids the inputs reach (interpreter
    ids of storages and graphs, Python ids of the objects) it holds (and what a dict holds there); of each list,
    where it holds one of the input objects; the unit's flags and counters as they are.  Equal at two calls on the
    same objects, a record can have grown with anything else (a key finer than ``world``: session 19's blocker 2).
    Left out: ``unsure_context`` (read only to record a save or a write, which an effect-free call does not) and
    ``discarded_call`` (the call the running statement drops: compared by identity with the callee's own nodes,
    never the caller's)."""
    probe = fp.seen_ids | fp.objects.keys()
    out = []
    for name, item in vars(interp).items():
        if name in _RESTORED or name in ("unsure_context", "discarded_call"):
            continue
        if isinstance(item, (set, frozenset)):
            out.append((name, frozenset(k for k in probe if k in item)))
        elif isinstance(item, dict):
            out.append((name, tuple((k, id(item[k])) for k in probe if k in item)))
        elif isinstance(item, (list, tuple)):
            out.append((name, tuple(i for i, v in enumerate(item) if id(v) in fp.objects)))
        elif isinstance(item, (int, bool, str)) or item is None:
            out.append((name, item))
        else:
            out.append((name, id(item)))
    out.append(("run_log.escaped", frozenset(k for k in probe if k in interp.run_log.escaped)))
    by_storage = interp.saves._by_storage  # the saves of the inputs' storages (what a write among them would hit)
    out.append(("saves", tuple((k, len(by_storage[k]), by_storage[k][-1].consumed) for k in probe if by_storage.get(k))))
    return tuple(out)


def _next_id() -> int:
    """The interpreter's next fresh id, not taking it."""
    return int(repr(values._ids)[6:-1])


@dataclasses.dataclass
class Recorded:
    """What an effect-free followed call did that a replay gives again."""

    fp: Fingerprint  # its inputs, numbered
    result: tuple  # ("plain", value) or ("input", number)
    steps: int
    seq: int
    ids: int
    entries: list  # the run log's statements run and their frames
    frames: list
    made: int  # the run log's frame count before the call
    made_after: int
    parameters: dict  # frame -> parameters' memory, of the frames the call opened
    call_stats: collections.Counter


REPLAY = collections.Counter()
MEMO: dict = {}
EFFECTFUL: set = set()  # (unit, callee) of the calls that had an effect: not fingerprinted again in that unit


def replay_inline(original):
    def inline(self, fn, args, kwargs, node, self_value=None, record=True, scope=None, owner=None, max_depth=5,
               module_path=None, frame=None):
        if len(self.call_stack) >= max_depth or any(c.fn is fn for c in self.call_stack) or frame is not None:
            return original(self, fn, args, kwargs, node, self_value, record, scope, owner, max_depth, module_path,
                            frame)
        if (id(self), id(fn)) in EFFECTFUL:
            REPLAY["run (a callee with effects)"] += 1
            return original(self, fn, args, kwargs, node, self_value, record, scope, owner, max_depth, module_path,
                            frame)
        fp = Fingerprint(identity=True)
        try:
            key = (id(self), _key(fp, self, fn, args, kwargs, self_value, record, scope, owner, module_path),
                   world(self), tuple((k, id(v)) for k, v in self.presets.items()))
        except (OverflowError, RecursionError):
            REPLAY["inputs too large"] += 1
            return original(self, fn, args, kwargs, node, self_value, record, scope, owner, max_depth, module_path,
                            frame)
        done = MEMO.get(key)
        if done is not None and self.steps + done.steps < interpreter.MAX_STEPS - 1:
            REPLAY["replayed"] += 1
            REPLAY["steps replayed"] += done.steps
            return _replay(self, done, fp)
        REPLAY["run"] += 1
        log = self.run_log
        start = (self.steps, self.seq, _next_id(), len(log.entries), log._made, collections.Counter(calls.CALL_STATS))
        grad = self.state.grad_enabled
        result = original(self, fn, args, kwargs, node, self_value, record, scope, owner, max_depth, module_path,
                          frame)
        if self.state.grad_enabled != grad or world(self) != key[2]:
            EFFECTFUL.add((id(self), id(fn)))
            return result
        if not (_plain(result) or id(result) in fp.objects):
            EFFECTFUL.add((id(self), id(fn)))
            return result
        try:
            again = Fingerprint(identity=True)
            if (again.of(list(args)), again.of(dict(kwargs)), again.of(self_value)) != key[1][1:4]:
                EFFECTFUL.add((id(self), id(fn)))
                return result
        except (OverflowError, RecursionError):
            return result
        steps, seq, ids, entries, made, stats = start
        MEMO[key] = Recorded(fp, _outcome(result, fp), self.steps - steps, self.seq - seq, _next_id() - ids,
                             log.entries[entries:], log.frames[entries:], made, log._made,
                             {f: p for f, p in log.parameters.items() if f > made},
                             collections.Counter(calls.CALL_STATS) - stats)
        return result

    return inline


def _replay(self, done: Recorded, fp: Fingerprint):
    self.steps += done.steps
    self.seq += done.seq
    values._ids = itertools.count(_next_id() + done.ids)
    log = self.run_log
    shift = log._made - done.made
    log.entries.extend(done.entries)
    log.frames.extend(f + shift if f > done.made else f for f in done.frames)
    for f, params in done.parameters.items():  # the very same inputs: the same memory
        log.parameters[f + shift] = params
    log._made += done.made_after - done.made
    calls.CALL_STATS.update(done.call_stats)
    kind, value = done.result
    return value if kind == "plain" else done.fp.keep[value]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folders", nargs="*", type=Path)
    parser.add_argument("--files-from", type=Path)
    parser.add_argument("--limit", type=int, default=0)
    parser.add_argument("--reads", action="store_true",
                        help="also tell repeats by the records their earlier call read (slow: every attribute lookup "
                             "on the interpreter is tracked)")
    parser.add_argument("--stamps", action="store_true",
                        help="also count a write of any value's field (a values-only epoch) between repeats")
    parser.add_argument("--replay", action="store_true",
                        help="instead: run the analysis plain and with the replay prototype, A B A B, and compare")
    args = parser.parse_args()
    if args.files_from:
        files = [Path(line) for line in args.files_from.read_text().splitlines() if line.strip()]
    else:
        files = sorted(p for folder in args.folders for p in folder.rglob("*.py"))
    if args.limit:
        files = files[: args.limit]
    sources = [(path, path.read_bytes()) for path in files]
    warnings.simplefilter("ignore")
    # the same run's yardsticks: ast.parse, and the analysis unmeasured
    start = time.process_time()
    for _, data in sources:
        try:
            ast.parse(data)
        except (SyntaxError, ValueError):
            pass
    parse = time.process_time() - start
    analyze_source(b"import torch\nx = torch.zeros(1)\nx += 1\n")
    start = time.process_time()
    for path, data in sources:
        analyze_source(data, str(path), Config(jedi=False))
    plain = time.process_time() - start
    if args.replay:
        return compare_replay(sources, parse)

    followed.FollowedCallsMixin.inline = measure_inline(followed.FollowedCallsMixin.inline)
    if args.stamps:
        stamp_value_writes()
    if args.reads:
        global TRACK_READS
        TRACK_READS = True
        interpreter.Interpreter.__getattribute__ = _tracking_getattribute
    units = []
    init = interpreter.Interpreter.__init__

    def counting_init(self, *a, **k):
        init(self, *a, **k)
        units.append(self)  # alive until the file is done: ``id(unit)`` names one unit

    interpreter.Interpreter.__init__ = counting_init
    total_steps = 0
    start = time.process_time()
    for path, data in sources:
        SEEN.clear()
        READ_SETS.clear()
        PLACES_LAST.clear()
        EPOCH_LAST.clear()
        OUTCOME.clear()
        ALIVE.clear()
        analyze_source(data, str(path), Config(jedi=False))
        total_steps += sum(u.steps for u in units)
        units.clear()
    print(f"{len(files)} files; CPU s: ast.parse {parse:.2f}, analysis {plain:.2f} ({plain / parse:.1f}x), "
          f"analysis measured {time.process_time() - start:.2f}")
    total = STATS["calls"] or 1
    for name, n in sorted(STATS.items(), key=lambda kv: -kv[1]):
        print(f"{n:9,d}  {100 * n / total:5.1f} %  {name}")
    print(f"steps spent inside outermost followed calls, of {total_steps:,} steps of every unit:")
    for name, n in sorted(STEPS.items(), key=lambda kv: -kv[1]):
        print(f"{n:12,d}  {100 * n / (total_steps or 1):5.1f} %  {name}")
    print(f"strict keys of every measured call: {COST['fingerprint nodes (strict key)']:,.0f} nodes walked, "
          f"{COST['strict key']:.2f} CPU s ({100 * COST['strict key'] / plain:.1f} % of the unmeasured analysis)")
    print("replay check: the repeats of a unit whose earlier call was effect-free, run again and compared:")
    for name, n in sorted(CHECK.items(), key=lambda kv: -kv[1]):
        print(f"{n:9,d}  {name}")
    print("callees most followed:", BY_CALLEE.most_common(12))
    print("records where the inputs' places differ at a repeat on the same objects:", PLACES_DIFFER.most_common(15))
    for kind in _TAXONOMY_KINDS:
        print(f"{kind}s with effects: the effects a summary would instantiate, added greedily by the steps they "
              "open up (cumulative share of all steps):")
        for name, gained, share in greedy_coverage(TAXONOMY[kind], total_steps):
            print(f"{gained:12,d}  {share:5.1f} %  + {name}")
    print("steps of strict file repeats by callee:")
    for name, n in REPEATED.most_common(15):
        print(f"{n:12,d}  {100 * n / (total_steps or 1):5.1f} %  {name}")


def _findings(result) -> list:
    return [(d.line, d.span.column, d.code, d.severity.value, d.message) for d in result.diagnostics]


def compare_replay(sources: list, parse: float) -> None:
    """A B A B: the analysis as it is, then with effect-free repeats replayed; the CPU of each pass, the findings
    compared file by file."""
    plain_inline = followed.FollowedCallsMixin.inline
    replaying = replay_inline(plain_inline)
    units = []
    init = interpreter.Interpreter.__init__

    def keeping_init(self, *a, **k):
        init(self, *a, **k)
        units.append(self)  # alive until the file is done: ``id(unit)`` in the keys names one unit

    interpreter.Interpreter.__init__ = keeping_init
    found: dict = {}
    cpu = collections.defaultdict(list)
    for mode in ("plain", "replay", "plain", "replay"):
        followed.FollowedCallsMixin.inline = replaying if mode == "replay" else plain_inline
        REPLAY.clear()
        start = time.process_time()
        for path, data in sources:
            MEMO.clear()
            EFFECTFUL.clear()
            result = analyze_source(data, str(path), Config(jedi=False))
            units.clear()
            found.setdefault((mode, str(path)), _findings(result))
        cpu[mode].append(time.process_time() - start)
    differ = [path for path, data in sources if found[("plain", str(path))] != found[("replay", str(path))]]
    print(f"{len(sources)} files; CPU s: ast.parse {parse:.2f}; "
          + "; ".join(f"{mode} {', '.join(f'{c:.2f} ({c / parse:.1f}x)' for c in runs)}" for mode, runs in cpu.items()))
    print(f"followed calls run {REPLAY['run']:,}, replayed {REPLAY['replayed']:,} ({REPLAY['steps replayed']:,} steps "
          f"not run again), inputs too large {REPLAY['inputs too large']:,} (the last replay pass)")
    print(f"findings: {sum(len(found[('plain', str(p))]) for p, _ in sources)} plain; files whose findings differ: "
          f"{len(differ)}", *differ[:10])


if __name__ == "__main__":
    main()
