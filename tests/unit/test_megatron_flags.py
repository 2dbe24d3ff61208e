"""The static flag scan, on Megatron-like source trees that the tests write (no Megatron code is copied).

The files mimic the layout of a Megatron-LM checkout (megatron/training/arguments.py,
megatron/core/transformer/enums.py, megatron/training/argument_utils.py, config dataclasses) and every
declaration form the scan must understand, in the older literal style and the newer dataclass style.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from buildctl.megatron.flags import FlagTable, NotMegatronSource, replacement_in
from buildctl.megatron.scan import scan


def write_tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


ENUMS = """\
    import enum

    class ModelType(enum.Enum):
        encoder_or_decoder = 1

    class AttnBackend(enum.Enum):
        flash = 1
        fused = 2
        unfused = 3
        local = 4
        auto = 5

    class Strictness(str, enum.Enum):
        ASSUME_OK = "assume_ok_unexpected"
        LOG_ALL = "log_all"
"""

# The older, literal style (every flag an add_argument call), as at effebd81.
LITERAL_ARGUMENTS = """\
    import argparse

    from megatron.core.transformer.enums import AttnBackend
    from megatron.core.validation import Strictness

    try:
        from megatron.core.extensions.kitchen import KitchenSpecProvider
        HAVE_KITCHEN = True
    except ImportError:
        HAVE_KITCHEN = False

    def parse_args(extra_args_provider=None):
        parser = argparse.ArgumentParser(description='Megatron-LM Arguments',
                                         allow_abbrev=False)
        parser = _add_network_args(parser)
        parser = _add_training_args(parser)
        parser = _add_kitchen_args(parser)
        if extra_args_provider is not None:
            parser = extra_args_provider(parser)
        return parser.parse_args()

    def validate_args(args):
        if args.enable_cuda_graph:
            print('--enable-cuda-graph is deprecated, use --cuda-graph-impl=local instead.')

    def _add_network_args(parser):
        group = parser.add_argument_group(title='network size')
        group.add_argument('--num-layers', type=int, default=None,
                           help='Number of transformer layers.')
        group.add_argument(
            '--hidden-size', type=int, default=None, help='Transformer hidden size.')
        group.add_argument('--save-interval', '--persistent-save-interval', type=int, default=None,
                           help='Iterations between checkpoint saves.')
        group.add_argument('--tp_comm_overlap_cfg', type=str, default=None)
        group.add_argument('--fp8-format', default=None, choices=['e4m3', 'hybrid'], dest='fp8',
                           help='Which fp8 format scheme to use.')
        group.add_argument('--attention-backend', type=lambda attn_backend: AttnBackend[attn_backend],
                           default=AttnBackend.auto, choices=list(AttnBackend),
                           help='Attention backend to use.')
        group.add_argument('--dist-ckpt-strictness', type=str, default='assume_ok_unexpected',
                           choices=[e.value for e in Strictness])
        group.add_argument('--exit-signal-level', type=int, choices=range(0, 3), default=0)
        group.add_argument('--lr', type=float, default=None, help='Learning rate.')
        group.add_argument('--recompute-modules', nargs='*', type=str, default=None)
        group.add_argument('--rl-partial-rollouts', action=argparse.BooleanOptionalAction, default=False)
        group.add_argument('--no-position-embedding', action='store_false', dest='add_position_embedding',
                           help='Disable position embedding. Deprecated: use --position-embedding-type')
        group.add_argument('--position-embedding-type', type=str, default='learned_absolute',
                           choices=['learned_absolute', 'rope'])
        group.add_argument('--use-dist-ckpt', action='store_true', dest='use_dist_ckpt_deprecated',
                           help=argparse.SUPPRESS)  # hidden; use --ckpt-format instead
        group.add_argument('--enable-cuda-graph', action='store_true')
        group.add_argument('--cuda-graph-impl', type=str, default='none',
                           choices=['none', 'local', 'transformer_engine'])
        group.add_argument('--legacy-tokens', action='store_true',
                           help='The legacy format was deprecated in 2024; this converts it.')
        group.add_argument('--onnx-safe', type=bool, required=False)
        return parser

    def _add_training_args(parser):
        group = parser.add_argument_group(title='training')
        group.add_argument('--bf16', action='store_true', help='Run in bfloat16.')
        group.add_argument('--data-path', nargs='*', default=None)
        return parser

    def _add_kitchen_args(parser):
        if HAVE_KITCHEN:
            group = parser.add_argument_group(title='kitchen')
            group.add_argument('--kitchen-recipe-number', type=int, default=None)
        return parser

    def _add_forgotten_args(parser):
        parser.add_argument('--never-added', action='store_true')
        return parser
"""

VALIDATION = """\
    from megatron.core.transformer.enums import Strictness
"""

# The newer style (Megatron >= 72230d25): ArgumentGroupFactory over config dataclasses.
FACTORY_ARGUMENTS = """\
    import argparse

    from megatron.core.transformer import TransformerConfig
    from megatron.training.argument_utils import ArgumentGroupFactory

    def parse_args():
        parser = argparse.ArgumentParser(description='Megatron-LM Arguments', allow_abbrev=False)
        parser = _add_transformer_args(parser)
        parser = _add_training_args(parser)
        return parser.parse_args()

    def _add_transformer_args(parser):
        exclude = [
            "pipeline_dtype",
            "fp8_param",
        ]
        factory = ArgumentGroupFactory(TransformerConfig, exclude=exclude)
        factory.build_group(parser, "transformer configuration")
        group = parser.add_argument_group(title='network size')
        group.add_argument('--swiglu', action='store_true')
        return parser

    def _add_training_args(parser):
        from megatron.training.config import TrainingConfig

        ArgumentGroupFactory(TrainingConfig, exclude=["internal_only"]).build_group(parser, "training")
        return parser
"""

ARGUMENT_UTILS = """\
    class ArgumentGroupFactory:
        '''Turns dataclass fields into argparse arguments (a stand-in with the real class's name).'''

        def __init__(self, src_cfg_class, exclude=None):
            self.src_cfg_class = src_cfg_class
"""

TRANSFORMER_INIT = """\
    from .transformer_config import TransformerConfig
"""

MODEL_PARALLEL_CONFIG = """\
    from dataclasses import dataclass, field
    from typing import Optional

    @dataclass
    class ModelParallelConfig:
        tensor_model_parallel_size: int = 1
        '''Intra-layer model parallelism.'''

        pipeline_dtype: object = None

        sequence_parallel: bool = False
        '''Makes tensor parallelism more memory-efficient.'''

        use_te_rng_tracker: bool = field(
            default=False, metadata={"argparse_meta": {"arg_names": ["--te-rng-tracker"]}}
        )
        gradient_accumulation_fusion: bool = True
        '''Fuses weight gradient accumulation.'''
"""

TRANSFORMER_CONFIG = """\
    from dataclasses import dataclass, field
    from typing import ClassVar, List, Literal, Optional, Union

    from megatron.core.model_parallel_config import ModelParallelConfig
    from megatron.core.transformer.enums import AttnBackend

    @dataclass
    class TransformerConfig(ModelParallelConfig):
        '''Configuration object for transformers.'''

        registry: ClassVar[dict] = {}

        num_layers: int = field(default=0, metadata={"argparse_meta": {"default": None}})
        '''Number of transformer layers.'''

        attention_backend: AttnBackend = AttnBackend.auto
        '''Attention backend to run.'''

        fp8: Optional[Literal['e4m3', 'hybrid']] = field(
            default=None, metadata={"argparse_meta": {"arg_names": ["--fp8-format"]}}
        )
        fp8_recipe: Optional[Literal['tensorwise', 'delayed', 'mxfp8', 'blockwise', 'custom']] = "delayed"
        fp8_param: bool = False
        add_bias_linear: bool = field(
            default=True, metadata={"argparse_meta": {"arg_names": ["--disable-bias-linear"]}}
        )
        moe_router_dtype: Optional[str] = None
        moe_hybridep_num_sms: int = 16
        '''DEPRECATED: use moe_flex_dispatcher_num_sms.'''

        moe_flex_dispatcher_num_sms: Optional[int] = None
        recompute_modules: Optional[List[str]] = None
        cuda_graph_scope: Union[str, List[str]] = field(
            default="full", metadata={"argparse_meta": {"nargs": "+", "type": str}}
        )
        layernorm_epsilon: float = field(
            default=1e-5, metadata={"argparse_meta": {"arg_names": ["--norm-epsilon"]}}
        )
        keep_in_memory: Optional[bool] = None
        computed: int = field(init=False, default=0)
        moe_layer_freq: Union[int, List[int]] = 1
"""

TRAINING_CONFIG_INIT = """\
    from megatron.training.config.training_config import TrainingConfig
"""

TRAINING_CONFIG = """\
    import dataclasses
    from dataclasses import field

    @dataclasses.dataclass(kw_only=True)
    class TrainingConfig:
        micro_batch_size: int | None = None
        global_batch_size: int | None = None
        rampup_batch_size: list[int] | None = field(default=None, metadata={"argparse_meta": {"nargs": 3}})
        use_nsys_profiler: bool = field(
            default=False, metadata={"argparse_meta": {"arg_names": ["--profile"], "dest": "profile"}}
        )
        internal_only: int = 0
"""

PRETRAIN_GPT = """\
    from megatron.training import pretrain

    try:
        from megatron.post_training.arguments import add_modelopt_args
        has_nvidia_modelopt = True
    except ImportError:
        has_nvidia_modelopt = False

    if __name__ == "__main__":
        pretrain(extra_args_provider=add_modelopt_args if has_nvidia_modelopt else None)
"""

POST_TRAINING_ARGS = """\
    def add_modelopt_args(parser):
        group = parser.add_argument_group(title="modelopt")
        group.add_argument("--export-te-mcore-model", action="store_true")
        return parser
"""


@pytest.fixture
def literal_tree(tmp_path: Path) -> Path:
    return write_tree(tmp_path / "literal", {
        "megatron/training/arguments.py": LITERAL_ARGUMENTS,
        "megatron/core/transformer/enums.py": ENUMS,
        "megatron/core/validation.py": VALIDATION,
        "megatron/core/package_info.py": "MAJOR = 0\nMINOR = 16\nPATCH = 0\nPRE_RELEASE = 'rc0'\n",
        "pretrain_gpt.py": PRETRAIN_GPT,
        "megatron/post_training/arguments.py": POST_TRAINING_ARGS,
    })


@pytest.fixture
def factory_tree(tmp_path: Path) -> Path:
    return write_tree(tmp_path / "factory", {
        "megatron/training/arguments.py": FACTORY_ARGUMENTS,
        "megatron/training/argument_utils.py": ARGUMENT_UTILS,
        "megatron/core/transformer/__init__.py": TRANSFORMER_INIT,
        "megatron/core/transformer/transformer_config.py": TRANSFORMER_CONFIG,
        "megatron/core/transformer/enums.py": ENUMS,
        "megatron/core/model_parallel_config.py": MODEL_PARALLEL_CONFIG,
        "megatron/training/config/__init__.py": TRAINING_CONFIG_INIT,
        "megatron/training/config/training_config.py": TRAINING_CONFIG,
    })


def long_options(table: FlagTable) -> set[str]:
    return {o for o in table.flags if o.startswith("--")}


# ------------------------------------------------------------------------------- literal style


def test_every_option_string_of_a_call_is_known(literal_tree: Path) -> None:
    t = scan(literal_tree)
    assert t.flags["--save-interval"] is t.flags["--persistent-save-interval"]
    assert t.flags["--save-interval"].dest == "save_interval"


def test_first_argument_on_the_next_line_and_underscores(literal_tree: Path) -> None:
    t = scan(literal_tree)
    assert t.flags["--hidden-size"].value_type == "int"
    call_line = textwrap.dedent(LITERAL_ARGUMENTS).splitlines().index("    group.add_argument(") + 1
    assert t.flags["--hidden-size"].source == f"megatron/training/arguments.py:{call_line}"
    assert "--tp_comm_overlap_cfg" in t.flags


def test_boolean_optional_action_adds_the_no_form(literal_tree: Path) -> None:
    spec = scan(literal_tree).flags["--no-rl-partial-rollouts"]
    assert spec.options == ("--rl-partial-rollouts", "--no-rl-partial-rollouts")
    assert spec.action == "boolean_optional"
    assert spec.value_for("--rl-partial-rollouts") is True
    assert spec.value_for("--no-rl-partial-rollouts") is False


def test_dest_rename(literal_tree: Path) -> None:
    t = scan(literal_tree)
    assert t.flags["--fp8-format"].dest == "fp8"
    assert t.flags["--fp8-format"].choices == ("e4m3", "hybrid")
    assert t.flags["--no-position-embedding"].dest == "add_position_embedding"
    assert t.flags["--no-position-embedding"].value_for("--no-position-embedding") is False


def test_enum_choices_are_read_from_the_enum_source(literal_tree: Path) -> None:
    t = scan(literal_tree)
    # choices=list(AttnBackend) with type=lambda x: AttnBackend[x]: member names
    assert t.flags["--attention-backend"].choices == ("flash", "fused", "unfused", "local", "auto")
    # choices=[e.value for e in Strictness], the enum imported through another module: values
    assert t.flags["--dist-ckpt-strictness"].choices == ("assume_ok_unexpected", "log_all")
    assert t.flags["--exit-signal-level"].choices == (0, 1, 2)


def test_types_and_nargs(literal_tree: Path) -> None:
    t = scan(literal_tree)
    assert (t.flags["--lr"].value_type, t.flags["--lr"].nargs) == ("float", None)
    assert (t.flags["--num-layers"].value_type, t.flags["--recompute-modules"].nargs) == ("int", "*")
    assert t.flags["--onnx-safe"].value_type == "bool" and t.flags["--onnx-safe"].action == "store"
    assert t.flags["--bf16"].action == "store_true" and not t.flags["--bf16"].takes_value


def test_deprecations_as_megatron_marks_them(literal_tree: Path) -> None:
    t = scan(literal_tree)
    pos = t.flags["--no-position-embedding"].deprecated
    assert pos is not None and replacement_in(pos) == "--position-embedding-type"
    # hidden flag: dest *_deprecated, the replacement named in the comment on its line
    ckpt = t.flags["--use-dist-ckpt"].deprecated
    assert ckpt is not None and replacement_in(ckpt) == "--ckpt-format"
    # stated in validate_args, not in the declaration
    cuda = t.flags["--enable-cuda-graph"].deprecated
    assert cuda is not None and replacement_in(cuda) == "--cuda-graph-impl"
    # a lower-case mention of something else being deprecated does not mark the flag
    assert t.flags["--legacy-tokens"].deprecated is None
    assert t.flags["--bf16"].deprecated is None


def test_conditional_and_never_added_flags_say_so(literal_tree: Path) -> None:
    t = scan(literal_tree)
    assert t.flags["--kitchen-recipe-number"].condition == "HAVE_KITCHEN"
    never = t.flags["--never-added"].condition
    assert never is not None and "_add_forgotten_args" in never
    assert t.flags["--bf16"].condition is None


def test_parser_settings_version_and_help(literal_tree: Path) -> None:
    t = scan(literal_tree)
    assert t.allow_abbrev is False
    assert t.version == "0.16.0rc0"
    assert t.generated is False
    assert "--help" in t.flags and "-h" in t.flags


def test_entry_script_extra_args_provider(literal_tree: Path) -> None:
    assert "--export-te-mcore-model" not in scan(literal_tree).flags
    spec = scan(literal_tree, entry_script="pretrain_gpt.py").flags["--export-te-mcore-model"]
    assert spec.condition == "has_nvidia_modelopt (in pretrain_gpt.py)"


def test_not_a_megatron_tree(tmp_path: Path) -> None:
    with pytest.raises(NotMegatronSource, match=r"megatron/training/arguments\.py"):
        scan(tmp_path)


def test_an_unreadable_choices_expression_becomes_a_note(tmp_path: Path) -> None:
    root = write_tree(tmp_path, {"megatron/training/arguments.py": """\
        def _add(group):
            group.add_argument('--mode', choices=compute_choices())
    """})
    t = scan(root)
    assert t.flags["--mode"].choices is None
    assert any("compute_choices()" in n for n in t.notes)


# ------------------------------------------------------------------------------- dataclass style


def test_dataclass_fields_become_flags(factory_tree: Path) -> None:
    t = scan(factory_tree)
    assert t.generated is True
    num_layers = t.flags["--num-layers"]
    assert (num_layers.origin, num_layers.value_type, num_layers.dest) == ("dataclass", "int", "num_layers")
    assert num_layers.source.startswith("megatron/core/transformer/transformer_config.py:")
    assert "(TransformerConfig.num_layers)" in num_layers.source
    # Optional[int] -> int; a field inherited from the parent dataclass in another module
    assert t.flags["--moe-flex-dispatcher-num-sms"].value_type == "int"
    assert t.flags["--tensor-model-parallel-size"].value_type == "int"
    assert "--swiglu" in t.flags  # the literal calls of the same file are still read


def test_bool_fields_store_true_or_no_and_disable(factory_tree: Path) -> None:
    t = scan(factory_tree)
    assert t.flags["--sequence-parallel"].action == "store_true"
    fusion = t.flags["--no-gradient-accumulation-fusion"]
    assert fusion.options == ("--no-gradient-accumulation-fusion", "--disable-gradient-accumulation-fusion")
    assert fusion.action == "store_false" and fusion.dest == "gradient_accumulation_fusion"
    assert "--gradient-accumulation-fusion" not in t.flags
    # Optional[bool] = None is not "== False": store_false, as ArgumentGroupFactory does it
    assert t.flags["--no-keep-in-memory"].action == "store_false"


def test_argparse_meta_overrides(factory_tree: Path) -> None:
    t = scan(factory_tree)
    assert t.flags["--te-rng-tracker"].dest == "use_te_rng_tracker"
    assert t.flags["--te-rng-tracker"].action == "store_true"
    assert "--use-te-rng-tracker" not in t.flags
    bias = t.flags["--disable-bias-linear"]
    assert (bias.action, bias.dest) == ("store_false", "add_bias_linear")
    assert t.flags["--norm-epsilon"].dest == "layernorm_epsilon"
    assert t.flags["--rampup-batch-size"].nargs == 3
    profile = t.flags["--profile"]
    assert (profile.dest, profile.action) == ("profile", "store_true")
    scope = t.flags["--cuda-graph-scope"]
    assert (scope.nargs, scope.value_type) == ("+", "str")


def test_literal_enum_and_list_annotations(factory_tree: Path) -> None:
    t = scan(factory_tree)
    assert t.flags["--fp8-recipe"].choices == ("tensorwise", "delayed", "mxfp8", "blockwise", "custom")
    assert t.flags["--fp8-format"].choices == ("e4m3", "hybrid")
    assert t.flags["--fp8-format"].dest == "fp8"
    assert t.flags["--attention-backend"].choices == ("flash", "fused", "unfused", "local", "auto")
    assert t.flags["--recompute-modules"].nargs == "+"
    assert t.flags["--moe-layer-freq"].value_type == "other"  # Union[int, List[int]]: not inferred


def test_exclude_init_false_and_classvars(factory_tree: Path) -> None:
    t = scan(factory_tree)
    for absent in ("--pipeline-dtype", "--fp8-param", "--internal-only", "--computed", "--registry"):
        assert absent not in t.flags, absent


def test_deprecated_field_docstring(factory_tree: Path) -> None:
    spec = scan(factory_tree).flags["--moe-hybridep-num-sms"]
    assert spec.deprecated is not None and replacement_in(spec.deprecated) == "moe_flex_dispatcher_num_sms"


def test_a_dataclass_that_is_not_in_the_tree_is_a_note(tmp_path: Path) -> None:
    root = write_tree(tmp_path, {"megatron/training/arguments.py": """\
        from megatron.training.argument_utils import ArgumentGroupFactory
        from somewhere_else import ExternalConfig

        def _add(parser):
            ArgumentGroupFactory(ExternalConfig).build_group(parser, "x")
    """})
    t = scan(root)
    assert t.generated is True
    assert any("ExternalConfig" in n and "not found" in n for n in t.notes)


def test_literal_and_factory_scans_agree_on_the_same_flag(literal_tree: Path, factory_tree: Path) -> None:
    # --attention-backend is a literal call in one tree and a dataclass field in the other
    a = scan(literal_tree).flags["--attention-backend"]
    b = scan(factory_tree).flags["--attention-backend"]
    assert (a.origin, b.origin) == ("add_argument", "dataclass")
    assert a.choices == b.choices
    assert long_options(scan(factory_tree)) >= {"--fp8-recipe", "--attention-backend", "--fp8-format"}
