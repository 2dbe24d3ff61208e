"""Consistency checks over the arguments alone: parallel sizes against the GPU count, the pipeline
layout, MoE layer frequency, HybridEP's router, MXFP8 param gather."""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from buildctl.errors import Location
from buildctl.manifest.model import NOWHERE, Variant
from buildctl.megatron import rules
from buildctl.megatron.flags import FlagTable
from buildctl.megatron.report import LintFinding, Severity, _effective, _Use

# --------------------------------------------------------------------------- pipeline layout


@dataclass(frozen=True, kw_only=True)
class PipelineLayout:
    """A --pipeline-model-parallel-layout string, expanded (E embedding, t transformer, m mtp, L loss)."""

    text: str
    stages: tuple[str, ...]  # one string of layer letters per stage, in stage order

    @property
    def decoder_layers(self) -> int:
        return sum(s.count("t") for s in self.stages)

    def count(self, letter: str) -> int:
        return sum(s.count(letter) for s in self.stages)


class LayoutError(ValueError):
    pass


_LAYERS = frozenset("ELtm")


def parse_layout(text: str) -> PipelineLayout:
    """Expand a layout string the way Megatron does (PipelineParallelLayerLayout.parse_str_to_list):
    commas are cosmetic, ``(X)*N`` repeats X (which may hold ``|``), ``c*N`` repeats one letter,
    ``|`` separates stages."""
    s = text.replace(",", "")
    s = re.sub(r"\(([^)]+)\)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), s)
    s = re.sub(r"(.)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), s)
    stages = tuple(s.split("|"))
    for stage in stages:
        bad = sorted(set(stage) - _LAYERS)
        if bad:
            raise LayoutError(f"{text!r} holds {', '.join(repr(b) for b in bad)} after expansion; a layout "
                              "uses only E (embedding), t (transformer layer), m (MTP layer), L (loss), | and (...)*N")
    return PipelineLayout(text=text, stages=stages)


# ------------------------------------------------------------------------------ moe layer freq


def moe_layer_pattern(text: str) -> int | list[int]:
    """--moe-layer-freq as Megatron reads it: an integer N, or a Python list expression such as
    ``([0]*3+[1]*58)``. Evaluated on the AST, only list literals of integers, + and *."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as exc:
        raise ValueError(f"{text!r} is neither an integer nor a list expression ({exc.msg})") from None

    def ev(node: ast.expr) -> int | list[int]:
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.List):
            items = [ev(e) for e in node.elts]
            if not all(isinstance(i, int) for i in items):
                raise ValueError("a list of integers was expected")
            return [i for i in items if isinstance(i, int)]
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Mult):
            left, right = ev(node.left), ev(node.right)
            if isinstance(node.op, ast.Add) and isinstance(left, list) and isinstance(right, list):
                return left + right
            if isinstance(node.op, ast.Mult):
                if isinstance(left, list) and isinstance(right, int) and 0 <= right <= 100_000:
                    return left * right
                if isinstance(left, int) and isinstance(right, list) and 0 <= left <= 100_000:
                    return right * left
        raise ValueError(f"{ast.unparse(node)!r} is not a list of integers, + or *")

    try:
        result = ev(tree)
    except ValueError as exc:
        raise ValueError(f"{text!r}: {exc}") from None
    if isinstance(result, int):
        raise ValueError(f"{text!r} evaluates to the integer {result}; write it as {result}")
    return result


class _Checks:
    """The arguments of one launch, read the way argparse would, and the checks that need only them;
    asserts._Consistency adds the upstream assertions and runs them all."""

    def __init__(self, uses: Sequence[_Use], table: FlagTable | None, gpus: int | None, gpus_from: str,
                 gpus_at: Location, *, root: Path | None = None, variant: Variant | None = None,
                 env: Mapping[str, str] | None = None, env_at: Location = NOWHERE) -> None:
        self.uses = uses
        self.table = table
        self.gpus = gpus
        self.gpus_from = gpus_from
        self.gpus_at = gpus_at
        self.root = root  # the pinned Megatron tree, where the rules read their assertions' lines
        self.variant = variant
        self.env = dict(env or {})
        self.env_at = env_at
        self.findings: list[LintFinding] = []
        self.derived: dict[str, int | str] = {}
        self.notes: list[str] = []


    # -- reading values

    def last(self, option: str) -> _Use | None:
        """The argument that sets ``option``'s dest last (aliases included when the source is known)."""
        spec = self.table.get(option) if self.table else None
        dest = spec.dest if spec else option.lstrip("-").replace("-", "_")
        found = None
        for u in self.uses:
            if (u.dest == dest) if spec else (u.option == option):
                found = u
        return found

    def value(self, option: str) -> str | None:
        u = self.last(option)
        return u.values[-1] if u is not None and u.values else None

    def flag_on(self, option: str) -> bool:
        u = self.last(option)
        if u is None:
            return False
        eff = _effective(u)
        return eff if isinstance(eff, bool) else True

    def integer(self, option: str, default: int | None) -> int | None:
        text = self.value(option)
        if text is None:
            return default
        try:
            return int(text)
        except ValueError:
            return None  # reported by the type check when the source is known

    def virtual_stages(self) -> int | None:
        """The virtual stages per pipeline rank as validate_args derives them (None: no interleaving)."""
        pp = self.integer("--pipeline-model-parallel-size", 1) or 1
        layout = self.value("--pipeline-model-parallel-layout")
        if layout is not None:
            try:
                stages = len(parse_layout(layout).stages)
            except LayoutError:
                return None
            return stages // pp if stages % pp == 0 and stages // pp > 1 else None
        nvs = self.integer("--num-virtual-stages-per-pipeline-rank", None)
        if nvs is not None:
            return nvs if nvs > 1 else None
        per_vstage = self.integer("--num-layers-per-virtual-pipeline-stage", None)
        layers = self.split_layers()
        if per_vstage and layers is not None and layers % pp == 0 and (layers // pp) % per_vstage == 0:
            v = (layers // pp) // per_vstage
            return v if v > 1 else None
        return None

    def split_layers(self) -> int | None:
        """--num-layers plus the embedding / loss stages the split options count (arguments.py 590-596, 615-622)."""
        layers = self.integer("--num-layers", None)
        if layers is None:
            return None
        return (layers + int(self.flag_on("--account-for-embedding-in-pipeline-split"))
                + int(self.flag_on("--account-for-loss-in-pipeline-split")))

    def at(self, *options: str) -> Location:
        for o in options:
            u = self.last(o)
            if u is not None:
                return u.at
        return self.gpus_at

    def add(self, severity: Severity, check: str, flag: str, message: str, suggestion: str, location: Location,
            cite: rules.Cite | None = None, value: str | None = None) -> None:
        source = rules.where(cite, self.root).text if cite is not None else ""
        if value is None:
            value = " ".join(self.last(flag).values) if self.last(flag) is not None else ""  # type: ignore[union-attr]
        self.findings.append(LintFinding(severity=severity, check=check, flag=flag, message=message,
                                         suggestion=suggestion, at=location, value=value, source=source))

    def archs(self) -> list[tuple[int, int]]:
        """The variant's compute capabilities as (major, minor), those that parse."""
        out = []
        for a in self.variant.gpu_archs if self.variant is not None else ():
            major, _, minor = a.partition(".")
            if major.isdigit() and (minor or "0").isdigit():
                out.append((int(major), int(minor or "0")))
        return out

    # -- the checks

    def parallel_sizes(self) -> None:
        tp = self.integer("--tensor-model-parallel-size", 1)
        pp = self.integer("--pipeline-model-parallel-size", 1)
        cp = self.integer("--context-parallel-size", 1)
        ep = self.integer("--expert-model-parallel-size", 1)
        etp = self.integer("--expert-tensor-parallel-size", tp)
        if tp is None or pp is None or cp is None or ep is None or etp is None:
            return
        given = {"--tensor-model-parallel-size": tp, "--pipeline-model-parallel-size": pp,
                 "--context-parallel-size": cp, "--expert-model-parallel-size": ep,
                 "--expert-tensor-parallel-size": etp}
        below = [(o, n) for o, n in given.items() if n < 1 and self.last(o) is not None]
        for option, n in below:  # Megatron's process groups need 1 or more of each (and 0 divides nothing here)
            self.add("error", "parallel-sizes", option, f"{option} {n}: a parallel size must be 1 or more",
                     "give 1 or more", self.at(option))
        if below or min(given.values()) < 1:
            return
        where = self.at("--pipeline-model-parallel-size", "--tensor-model-parallel-size")
        heads = self.integer("--num-attention-heads", None)
        if heads is not None and heads % tp:
            self.add("error", "parallel-sizes", "--tensor-model-parallel-size",
                     f"--num-attention-heads {heads} is not divisible by TP {tp}",
                     "choose a TP that divides the number of heads", self.at("--tensor-model-parallel-size"))
        experts = self.integer("--num-experts", None)
        if experts is not None and experts % ep:
            self.add("error", "parallel-sizes", "--expert-model-parallel-size",
                     f"--num-experts {experts} is not divisible by EP {ep}",
                     "choose an EP that divides the number of experts", self.at("--expert-model-parallel-size"),
                     cite=rules.EP_EXPERTS)
        if self.gpus is None:
            self.notes.append("no GPU count is declared (entrypoint.gpus or the profile's gpus): "
                              "parallel sizes were not checked against one")
            return
        model = tp * pp * cp
        sizes = f"TP {tp} x PP {pp} x CP {cp} = {model}"
        if model > self.gpus or self.gpus % model:
            need = "at least" if model > self.gpus else "a multiple of"
            self.add("error", "parallel-sizes", "--pipeline-model-parallel-size",
                     f"{sizes} GPUs per model replica cannot run on the {self.gpus} GPUs of {self.gpus_from} "
                     f"(it needs {need} {model})",
                     f"run it on a multiple of {model} GPUs (a profile with gpus: {model} or more), or lower "
                     f"TP/PP/CP so that their product divides {self.gpus}", where, cite=rules.WORLD_DIVISIBLE)
            return
        dp = self.gpus // model
        self.derived["data_parallel"] = dp
        if ep > 1 or etp != tp:
            expert_model = etp * ep * pp
            if self.gpus % expert_model:
                self.add("error", "parallel-sizes", "--expert-model-parallel-size",
                         f"ETP {etp} x EP {ep} x PP {pp} = {expert_model} does not divide the {self.gpus} GPUs",
                         f"choose EP so that ETP x EP x PP divides {self.gpus}", self.at("--expert-model-parallel-size"))
            else:
                self.derived["expert_data_parallel"] = self.gpus // expert_model
        gbs = self.integer("--global-batch-size", None)
        mbs = self.integer("--micro-batch-size", 1)
        if gbs is not None and mbs and gbs % (mbs * dp):
            self.add("error", "batch-size", "--global-batch-size",
                     f"global batch {gbs} is not divisible by micro batch {mbs} x data-parallel {dp} "
                     f"({self.gpus} GPUs / {model})",
                     f"use a global batch that is a multiple of {mbs * dp}", self.at("--global-batch-size"))
        elif gbs is not None and mbs:
            self.derived["microbatches_per_step"] = gbs // (mbs * dp)

    def pipeline_layout(self) -> None:
        u = self.last("--pipeline-model-parallel-layout")
        if u is None or not u.values:
            return
        flag = "--pipeline-model-parallel-layout"
        try:
            layout = parse_layout(u.values[-1])
        except LayoutError as exc:
            self.add("error", "pipeline-layout", flag, str(exc), "fix the layout string", u.at)
            return
        stages = len(layout.stages)
        self.derived["pipeline_stages"] = stages
        flat = "".join(layout.stages)
        if layout.count("E") != 1 or not flat.startswith("E"):
            self.add("error", "pipeline-layout", flag, "the layout must start with the embedding E, exactly once",
                     "put one E at the start of the first stage", u.at)
        if layout.count("L") != 1 or not flat.endswith("L"):
            self.add("error", "pipeline-layout", flag, "the layout must end with the loss L, exactly once",
                     "put one L at the end of the last stage", u.at)
        layers = self.integer("--num-layers", None)
        if layers is not None and layout.decoder_layers != layers:
            self.add("error", "pipeline-layout", flag,
                     f"{layout.text!r} holds {layout.decoder_layers} transformer layers (t), --num-layers is {layers}",
                     "make the t count match --num-layers", u.at)
        mtp = self.integer("--mtp-num-layers", 0) or 0
        if layout.count("m") != mtp:
            self.add("error", "pipeline-layout", flag,
                     f"{layout.text!r} holds {layout.count('m')} MTP layers (m), --mtp-num-layers is {mtp}",
                     "make the m count match --mtp-num-layers", u.at)
        pp = self.integer("--pipeline-model-parallel-size", 1) or 1
        if stages % pp:
            self.add("error", "pipeline-layout", flag,
                     f"{layout.text!r} has {stages} stages, not a multiple of PP {pp}",
                     f"give PP x virtual stages = {stages} (PP {pp} needs a multiple of {pp} stages)", u.at,
                     cite=rules.LAYOUT_STAGES)
            return
        vpp = stages // pp
        self.derived["virtual_stages_per_rank"] = vpp
        for other in ("--num-virtual-stages-per-pipeline-rank", "--num-layers-per-virtual-pipeline-stage"):
            o = self.last(other)
            if o is None:
                continue
            same = other == "--num-virtual-stages-per-pipeline-rank" and o.values and o.values[-1] == str(vpp)
            self.add("error", "pipeline-layout", other,
                     f"Megatron accepts only one of --pipeline-model-parallel-layout, "
                     f"--num-virtual-stages-per-pipeline-rank and --num-layers-per-virtual-pipeline-stage; "
                     f"the layout already gives {stages} stages / PP {pp} = {vpp} virtual stages per rank"
                     + ("" if same else f", {other} says {' '.join(o.values)}"),
                     f"remove {other}", o.at, cite=rules.ONE_VPP_SOURCE)

    def moe_layer_freq(self) -> None:
        u = self.last("--moe-layer-freq")
        if u is None or not u.values:
            return
        try:
            pattern = moe_layer_pattern(u.values[-1])
        except ValueError as exc:
            self.add("error", "moe-layer-freq", "--moe-layer-freq", str(exc),
                     "write an integer or a list expression such as ([0]*3+[1]*58)", u.at)
            return
        layers = self.integer("--num-layers", None)
        if isinstance(pattern, list):
            self.derived["moe_layers"] = sum(1 for p in pattern if p)
            if layers is not None and len(pattern) != layers:
                self.add("error", "moe-layer-freq", "--moe-layer-freq",
                         f"{u.values[-1]!r} describes {len(pattern)} layers, --num-layers is {layers}",
                         "give one entry per layer", u.at)

    def hybridep(self) -> None:
        backend = self.value("--moe-flex-dispatcher-backend")
        if backend != "hybridep":
            return
        at = self.at("--moe-flex-dispatcher-backend")
        dtype = self.value("--moe-router-dtype")
        if dtype != "fp32":
            self.add("error", "hybridep", "--moe-router-dtype",
                     f"--moe-flex-dispatcher-backend hybridep needs --moe-router-dtype fp32, "
                     f"{'it is not set' if dtype is None else f'it is {dtype}'}",
                     "add '- --moe-router-dtype: fp32'", self.at("--moe-router-dtype", "--moe-flex-dispatcher-backend"))
        dispatcher = self.value("--moe-token-dispatcher-type")
        if dispatcher != "flex":
            self.add("warning", "hybridep", "--moe-flex-dispatcher-backend",
                     f"the backend applies only to --moe-token-dispatcher-type flex (it is {dispatcher or 'not set'})",
                     "add '- --moe-token-dispatcher-type: flex'", at)

    def mxfp8_param_gather(self) -> None:
        if not self.flag_on("--reuse-grad-buf-for-mxfp8-param-ag"):
            return
        if not self.flag_on("--fp8-param-gather"):
            self.add("error", "mxfp8", "--fp8-param-gather",
                     "--reuse-grad-buf-for-mxfp8-param-ag needs --fp8-param-gather (Megatron's DDP config asserts it)",
                     "add '- --fp8-param-gather'", self.at("--reuse-grad-buf-for-mxfp8-param-ag"))
