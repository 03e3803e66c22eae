"""Every Pod annotation HAMi v2.10 reads or writes, as data, and the check of a device Pod's annotations.

TABLE was read off HAMi v2.10.0's code (``pkg/scheduler``, ``pkg/device/*``, ``pkg/util``), plus the
keys this webhook adds. A prefix (the part before ``/``) is HAMi's when HAMi or this webhook reads a Pod
annotation under it; on a device Pod, every annotation under such a prefix must be a key of TABLE and must
hold a value its reader understands. Each finding is a warning, or with HAMI_STRICT_ANNOTATIONS a denial;
docs/annotations.md has the reasons. A key HAMi's scheduler or device plugins write (OWNERS), and the label
HAMi's scheduler sets (OWNED_LABELS), are never the author's on any Pod: ``forged`` names it for the webhook's
denial, and app/preview/policies.py guards it where the webhook does not look. Every key and label HAMi writes on a
Pod is one of these or an exception of docs/rules.md#every-key-hami-writes (a test reads HAMi's code for them).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from app.admission import notices
from app.admission.devices import ascend, metax, mthreads, nvidia
from app.admission.devices.ascend import Ascend
from app.admission.devices.base import Device
from app.admission.devices.iluvatar import Iluvatar
from app.admission.notices import Notice

GPU_TYPE_ANNOTATION = "hami.io/gpu-type"
NODE_POLICY_ANNOTATION = "hami.io/node-scheduler-policy"
GPU_POLICY_ANNOTATION = "hami.io/gpu-scheduler-policy"
QUOTA_RESERVATION_ANNOTATION = "hami.io/quota-reservation"
# A namespace or Pod labelled so is not mutated (HAMi's chart's label); a Pod so labelled is charged all the same
# (docs/rules.md#the-opt-out-label). Its selector: the Pods the webhook mutates, for the policies' bindings.
OPT_OUT_LABEL, OPT_OUT = "hami.io/webhook", "ignore"
MUTATED = {"key": OPT_OUT_LABEL, "operator": "NotIn", "values": [OPT_OUT]}
CHIP = "{chip}"
"""In a key, each configured chip of the row's ``chips`` backend (HAMi builds these keys from commonWord)."""

MATCHED_CHARS = 64
"""An unknown key's name is compared with the known ones up to this length: keys are short, matching is not."""
SCHEDULER = "HAMi's scheduler"
SCHEDULER_AND_PLUGINS = "HAMi's scheduler and device plugins"
WEBHOOK = "HAMi's webhook"
OWNERS = (SCHEDULER, SCHEDULER_AND_PLUGINS)
"""The components whose annotations a Pod's author may never write: they hand a Pod its devices."""
NODE_LABEL = "hami.io/vgpu-node"
"""The label HAMi's scheduler sets beside the annotation of the same name (util.PatchPodAnnotations); HAMi's vGPU
monitor selects a node's Pods by it, so a Pod without it drops out of per-Pod metrics."""
OWNED_LABELS = (NODE_LABEL,)
"""The Pod labels HAMi's scheduler writes: a Pod's author may never."""


class Accepts(Protocol):
    """The values an annotation's reader understands."""

    @property
    def described(self) -> str:
        """The accepted values in words, completing "... is not ___" and the README's column."""
        ...

    def accepts(self, value: str) -> bool: ...


@dataclass(frozen=True)
class OneOf:
    """Exactly one of ``choices``."""

    choices: tuple[str, ...]
    label: str = ""

    @property
    def described(self) -> str:
        return self.label or f"one of {', '.join(self.choices)}"

    def accepts(self, value: str) -> bool:
        return value in self.choices


@dataclass(frozen=True)
class ListOf:
    """A comma-separated list of ``choices``, at least one; spaces around items count only in a single value,
    which HAMi compares as written (its list parsing trims them)."""

    choices: tuple[str, ...]

    @property
    def described(self) -> str:
        return f"a comma-separated list of {', '.join(self.choices)}"

    def accepts(self, value: str) -> bool:
        if "," not in value:
            return value in self.choices
        items = [item.strip() for item in value.split(",")]
        return any(items) and all(item in self.choices for item in items if item)


@dataclass(frozen=True)
class Text:
    """Anything: HAMi matches it as written (device UUIDs, card types), or only HAMi writes it."""

    described: str

    def accepts(self, value: str) -> bool:
        return True


@dataclass(frozen=True)
class Weights:
    """HAMi's ParseDeviceScoringWeights: ``slot=N,core=N,memory=N`` in any order, non-negative, one positive."""

    names: tuple[str, ...] = ("slot", "core", "memory")

    @property
    def described(self) -> str:
        return "slot=N,core=N,memory=N: whole numbers, at least one above 0"

    def accepts(self, value: str) -> bool:
        weights: dict[str, int] = {}
        for part in value.split(","):
            key, equals, number = part.strip().partition("=")
            key, number = key.strip(), number.strip()
            if not equals or key not in self.names or key in weights or not _go_int64(number):
                return False
            weights[key] = int(number)
        return len(weights) == len(self.names) and all(w >= 0 for w in weights.values()) and any(weights.values())


def _go_int64(text: str) -> bool:
    """Go's strconv.ParseInt(text, 10, 64) succeeds."""
    digits = text[1:] if text[:1] in ("+", "-") else text
    return digits.isascii() and digits.isdigit() and -(2**63) <= int(text) < 2**63


GO_BOOL = OneOf(("1", "t", "T", "TRUE", "true", "True", "0", "f", "F", "FALSE", "false", "False"), "true or false")
"""Go's strconv.ParseBool."""
UUIDS = Text("comma-separated device UUIDs; empty means any")
CARD_TYPES = Text("comma-separated card types, each matched case-insensitively within the model name")
BY_HAMI = Text("written by HAMi")


@dataclass(frozen=True)
class Annotation:
    """One Pod annotation: what its reader accepts, where HAMi reads it, and who writes it when not the author."""

    key: str
    accepts: Accepts
    read_in: tuple[str, ...] = ()
    """Files of HAMi v2.10 (or of this webhook, under app/) that read it."""
    written_by: str = ""
    """HAMi's component that sets it; the Pod's author should not."""
    chips: type | None = None
    """The backend (Ascend, Iluvatar) whose configured chips ``{chip}`` in the key stands for."""


def _uuids(prefix: str, *read_in: str, use: str = "use-gpuuuid", no_use: str = "nouse-gpuuuid") -> list[Annotation]:
    """A vendor's pair of device-UUID filters (HAMi's CheckUUID in pkg/device/devices.go)."""
    return [Annotation(f"{prefix}/{use}", UUIDS, read_in), Annotation(f"{prefix}/{no_use}", UUIDS, read_in)]


def _types(prefix: str, read_in: str, use: str, no_use: str) -> list[Annotation]:
    """A vendor's pair of card-type filters (HAMi's CheckType in pkg/device/devices.go)."""
    return [
        Annotation(f"{prefix}/{use}", CARD_TYPES, (read_in,)),
        Annotation(f"{prefix}/{no_use}", CARD_TYPES, (read_in,)),
    ]


def _allocation(
    *keys: str, read_in: tuple[str, ...] = ("pkg/device/devices.go",), chips: type | None = None
) -> list[Annotation]:
    """Device assignments HAMi's scheduler writes when it binds a Pod."""
    return [Annotation(key, BY_HAMI, read_in, SCHEDULER, chips) for key in keys]


SCHEDULER_FILES = ("pkg/scheduler/scheduler.go", "pkg/util/util.go")
KUNLUN_FILES = ("pkg/device/kunlun/device.go", "pkg/device/kunlun/vdevice.go")
TABLE: tuple[Annotation, ...] = (
    # -- scheduling, read by the scheduler for every vendor --
    Annotation(NODE_POLICY_ANNOTATION, OneOf(("binpack", "spread")), ("pkg/scheduler/score.go",)),
    Annotation(
        GPU_POLICY_ANNOTATION,
        ListOf(("binpack", "spread", "topology-aware", "mutex", "numa")),
        ("pkg/util/util.go", "pkg/scheduler/policy/gpu_policy.go"),
    ),
    Annotation("hami.io/device-scoring-weights", Weights(), ("pkg/util/device_scoring_weights.go",)),
    # -- written while scheduling and binding --
    Annotation(NODE_LABEL, BY_HAMI, SCHEDULER_FILES, SCHEDULER),
    Annotation("hami.io/vgpu-time", BY_HAMI, (), SCHEDULER),
    Annotation("hami.io/bind-time", BY_HAMI, ("pkg/util/util.go",), SCHEDULER),
    Annotation("hami.io/bind-phase", BY_HAMI, SCHEDULER_FILES, SCHEDULER_AND_PLUGINS),
    *_allocation(
        "hami.io/vgpu-devices-to-allocate",
        "hami.io/vgpu-devices-allocated",
        "hami.io/cambricon-mlu-devices-to-allocate",
        "hami.io/cambricon-mlu-devices-allocated",
        "hami.io/dcu-devices-to-allocate",
        "hami.io/dcu-devices-allocated",
        "hami.io/metax-gpu-devices-to-allocate",
        "hami.io/metax-gpu-devices-allocated",
        "hami.io/metax-sgpu-devices-to-allocate",
        "hami.io/metax-sgpu-devices-allocated",
        "hami.io/enflame-gcu-devices-to-allocate",
        "hami.io/enflame-gcu-devices-allocated",
        "hami.io/enflame-vgpu-devices-allocated",
        "hami.io/mthreads-vgpu-devices-to-allocate",
        "hami.io/mthreads-vgpu-devices-allocated",
        "hami.io/kunlun-allocated",
        "hami.io/xpu-devices-to-allocate",
        "hami.io/xpu-devices-allocated",
        "hami.io/aws-neuron-devices-allocated",
        "hami.io/amd-devices-to-allocate",
        "hami.io/amd-devices-allocated",
        "hami.io/Vastai-devices-to-allocate",
        "hami.io/Vastai-devices-allocated",
        "hami.io/Biren-devices-to-allocate",
        "hami.io/Biren-devices-allocated",
    ),
    *_allocation(f"hami.io/{CHIP}-devices-to-allocate", f"hami.io/{CHIP}-devices-allocated", chips=Ascend),
    *_allocation(f"hami.io/{CHIP}-devices-to-allocate", f"hami.io/{CHIP}-devices-allocated", chips=Iluvatar),
    *_allocation("hami.io/vgpu-mig-allocations", read_in=("pkg/scheduler/scheduler.go",)),
    # -- this webhook's own --
    Annotation(GPU_TYPE_ANNOTATION, Text("anything: set from the device backends found, a value given is kept")),
    Annotation(nvidia.CORE_POLICY_ANNOTATION, OneOf(nvidia.CORE_POLICIES), ("app/admission/devices/nvidia.py",)),
    # Written by this webhook, yet a row an author may hold: reinvoked, the webhook sees its own output again.
    Annotation(
        QUOTA_RESERVATION_ANNOTATION, Text("set by this webhook when quota reserves"), ("app/quota/feed/tables.py",)
    ),
    # -- NVIDIA --
    *_types("nvidia.com", "pkg/device/nvidia/device.go", "use-gputype", "nouse-gputype"),
    *_uuids("nvidia.com", "pkg/device/nvidia/device.go"),
    Annotation("nvidia.com/numa-bind", GO_BOOL, ("pkg/device/nvidia/device.go", "pkg/scheduler/scheduler.go")),
    Annotation(
        "nvidia.com/vgpu-mode",
        ListOf(("hami-core", "mig", "mps")),
        ("pkg/device/nvidia/device.go", "pkg/scheduler/score.go"),
    ),
    # -- Cambricon, Hygon --
    *_uuids("cambricon.com", "pkg/device/cambricon/device.go"),
    *_types("hygon.com", "pkg/device/hygon/device.go", "use-dcutype", "nouse-dcutype"),
    *_uuids("hygon.com", "pkg/device/hygon/device.go"),
    # -- Iluvatar, Ascend: keys per configured chip --
    Annotation(f"hami.io/use-{CHIP}-uuid", UUIDS, ("pkg/device/iluvatar/device.go",), chips=Iluvatar),
    Annotation(f"hami.io/no-use-{CHIP}-uuid", UUIDS, ("pkg/device/iluvatar/device.go",), chips=Iluvatar),
    Annotation(f"hami.io/use-{CHIP}-uuid", UUIDS, ("pkg/device/ascend/device.go",), chips=Ascend),
    Annotation(f"hami.io/no-use-{CHIP}-uuid", UUIDS, ("pkg/device/ascend/device.go",), chips=Ascend),
    Annotation(
        ascend.VNPU_MODE_ANNOTATION,
        OneOf((ascend.HAMI_CORE_MODE,), f"{ascend.HAMI_CORE_MODE} (any other value means hard split)"),
        ("pkg/device/ascend/device.go",),
    ),
    Annotation(f"huawei.com/{CHIP}", BY_HAMI, (), SCHEDULER, Ascend),
    # -- MetaX sGPU --
    *_uuids("metax-tech.com", "pkg/device/metax/sdevice.go"),
    Annotation(metax.APP_CLASS_ANNOTATION, OneOf(metax.APP_CLASSES), ("pkg/device/metax/sdevice.go",)),
    Annotation(metax.QOS_ANNOTATION, OneOf(metax.QOS_POLICIES), ("pkg/device/metax/sdevice.go",)),
    Annotation("metax-tech.com/sgpu-topology-aware", GO_BOOL, ("pkg/device/metax/sdevice.go",)),
    Annotation("metax-tech.com/gpu-devices-allocated", BY_HAMI, (), SCHEDULER),
    Annotation("metax-tech.com/predicate-time", BY_HAMI, (), SCHEDULER),
    # -- Moore Threads: filters under mthreads.ai; mthreads.com is written for its device plugin --
    *_uuids("mthreads.ai", "pkg/device/mthreads/device.go"),
    Annotation(mthreads.REQUEST_GPU_NUM_ANNOTATION, BY_HAMI, (), WEBHOOK),
    Annotation("mthreads.com/gpu-index", BY_HAMI, (), SCHEDULER),
    Annotation("mthreads.com/predicate-node", BY_HAMI, (), SCHEDULER),
    Annotation("mthreads.com/predicate-time", BY_HAMI, (), SCHEDULER),
    # -- the device choice handed to vendors' own device plugins, in keys of theirs without a prefix: no warning
    # is ever given for them (no prefix is HAMi's), yet only HAMi's scheduler writes them --
    *_allocation(
        "AWS_NEURON_IDS",
        "NEURON_ALLOCATED",
        "NEURON_ALLOC_TIME",
        "NEURON_RESOURCE_TYPE",
        read_in=("pkg/device/awsneuron/device.go",),
    ),
    *_allocation("BAIDU_COM_DEVICE_IDX", read_in=("pkg/device/kunlun/device.go",)),
    *_allocation("CAMBRICON_DSMLU_PROFILE", "CAMBRICON_DSMLU_ASSIGNED", read_in=("pkg/device/cambricon/device.go",)),
    *_allocation("assigned-containers", read_in=("pkg/device/enflame/device.go",)),
    *_allocation("predicate-time", read_in=("pkg/device/ascend/device.go",)),
    # -- Enflame --
    *_uuids("enflame.com", "pkg/device/enflame/device.go"),
    *(
        Annotation(f"enflame.com/{name}", BY_HAMI, (), SCHEDULER)
        for name in (
            "gcu-assigned",
            "gcu-assigned-time",
            "gcu-assigned-index",
            "gcu-assigned-id",
            "gcu-assigned-minor",
            "gcu-request-size",
        )
    ),
    # -- Kunlunxin: both pairs are checked for whole cards and vXPUs --
    *_uuids("baidu.com", *KUNLUN_FILES),
    *_uuids("hami.io", *KUNLUN_FILES, use="use-xpu-uuid", no_use="no-use-xpu-uuid"),
    # -- AWS Neuron, AMD, Vastai, Biren --
    *_uuids("aws.amazon.com", "pkg/device/awsneuron/device.go", use="use-neuron-uuid", no_use="nouse-neuron-uuid"),
    Annotation("aws.amazon.com/predicate-node", BY_HAMI, (), SCHEDULER),
    *_types("amd.com", "pkg/device/amd/device.go", "use-gputype", "nouse-gputype"),
    *_uuids("amd.com", "pkg/device/amd/device.go", use="use-gpu-uuid", no_use="nouse-gpu-uuid"),
    *_uuids("vastaitech.com", "pkg/device/vastai/device.go"),
    *_uuids("birentech.com", "pkg/device/biren/device.go"),
)


class AnnotationRules:
    """TABLE with each ``{chip}`` expanded for the configured backends, and the check of one Pod's annotations."""

    def __init__(self, devices: Iterable[Device]) -> None:
        devices = tuple(devices)
        self.rows: dict[str, Annotation] = {}
        for row in TABLE:
            chips = [d.key for d in devices if isinstance(d, row.chips)] if row.chips else [""]
            for chip in chips:
                self.rows[row.key.replace(CHIP, chip)] = row
        self.prefixes = frozenset(_prefix(key) for key, row in self.rows.items() if row.read_in) - {""}
        """Where HAMi reads annotations: each key under one is checked. Never "": keys without a prefix are anyone's."""
        self.owned = tuple(sorted(key for key, row in self.rows.items() if row.written_by in OWNERS))
        """The keys HAMi's scheduler and device plugins write (OWNERS): a Pod's author never may."""
        self._owned = frozenset(self.owned)
        self._names: dict[str, dict[str, str]] = {}  # prefix -> name after it -> key
        self._any_prefix: dict[str, str] = {}  # name -> its first key
        for key in self.rows:
            prefix, slash, name = key.partition("/")
            if not slash:
                continue  # never checked, so never suggested
            self._names.setdefault(prefix, {})[name] = key
            self._any_prefix.setdefault(name, key)

    def forged(self, annotations: Mapping[str, str], labels: Mapping[str, str]) -> str:
        """Why a Pod with ``annotations`` and ``labels`` cannot come from its author: the first (in the Pod's
        order) of ``owned``, else of OWNED_LABELS, named with who writes it; "" when none is."""
        key = next((key for key in annotations if key in self._owned), "")
        if key:
            return f"annotation {key} is written by {self.rows[key].written_by}, not by a Pod's author"
        label = next((key for key in labels if key in OWNED_LABELS), "")
        return f"label {label} is written by {SCHEDULER}, not by a Pod's author" if label else ""

    def check(self, annotations: Mapping[str, str]) -> list[Notice]:
        """A warning for each annotation under HAMi's prefixes that is unknown or not understood (one HAMi writes
        never gets here: ``forged`` denies the Pod first).

        Only the first MAX_WARNINGS unknown keys are compared with the known ones (the answer shows no more).
        """
        found: list[Notice] = []
        for key, value in annotations.items():
            if _prefix(key) not in self.prefixes:
                continue
            row = self.rows.get(key)
            if row is None:
                hint = f"; did you mean {self.closest(key)}?" if len(found) < notices.MAX_WARNINGS else ""
                found.append(Notice(notices.UNKNOWN_ANNOTATION, f"unknown annotation {notices.name(key)}{hint}"))
            elif not row.accepts.accepts(value):
                found.append(Notice(notices.INVALID_ANNOTATION_VALUE, _invalid(key, value, row.accepts.described)))
        return found

    def closest(self, key: str) -> str:
        """The known key most like ``key``, comparing the names after the prefixes: a close match under the
        same prefix, else under any prefix, else the likest under the same prefix."""
        prefix, _, name = key.partition("/")
        name = name[:MATCHED_CHARS]
        same = self._names[prefix]
        for pool in (same, self._any_prefix):
            match = difflib.get_close_matches(name, pool, n=1)
            if match:
                return pool[match[0]]
        return same[max(same, key=lambda known: difflib.SequenceMatcher(None, name, known).ratio())]


def _invalid(key: str, value: str, described: str) -> str:
    """The warning for a value the reader does not understand; without the value when both do not fit."""
    text = f"annotation {key}: {notices.value(value)} is not {described}"
    return text if len(text) <= notices.MAX_CHARS else f"annotation {key} accepts {described}"


def _prefix(key: str) -> str:
    """The part of a key before ``/`` ("" when it has none)."""
    prefix, slash, _name = key.partition("/")
    return prefix if slash else ""
