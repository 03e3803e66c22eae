"""Every Pod annotation and label HAMi's scheduler and device plugins write, read off HAMi's own code, is the
allocation guard's and the webhook's to refuse, or an exception docs/rules.md gives a reason for.

The writes are found where HAMi makes them: each assignment into the map a vendor's ``PatchAnnotations`` fills
(``annoinput``), each map handed to ``util.PatchPodAnnotations`` and the keys of every other Pod patch, the label
``PatchPodAnnotations`` adds and every ``PatchPodLabels``; each key expression is resolved through the constants
and device maps it names. An expression the reader cannot resolve fails the test, so a new form of write in a
later HAMi is read, never missed.
"""

from __future__ import annotations

import os
import re
import tarfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import pytest
import yaml

from app.admission.annotations import CHIP
from app.settings import Settings
from testbed import ROOT
from testbed.hami import DEFAULT_SOURCE_DIR

SETTINGS = Settings.from_env({"HAMI_ENABLE_ASCEND": "true", "HAMI_ENABLE_ILUVATAR": "true"})
RULES = ROOT / "docs" / "rules.md"
GUARD = ROOT / "manifests" / "base" / "policies" / "allocation-guard.yaml"
GoFiles = Mapping[str, str]
"""A HAMi tree's Go sources (tests apart) by path, e.g. ``pkg/util/util.go``."""


@dataclass(frozen=True, order=True)
class Write:
    """One key HAMi writes on a Pod: an annotation or a label, and the file that writes it."""

    kind: str
    key: str
    where: str


def hami_sources() -> GoFiles:
    """The Go files of the HAMi source beside the clone (a tarball or a tree), as the reference build finds it."""
    tarballs = sorted(DEFAULT_SOURCE_DIR.glob("hami-*.tar.gz"))
    if tarballs:
        files: dict[str, str] = {}
        with tarfile.open(tarballs[-1]) as tar:
            for member in tar:
                path = member.name.split("/", 1)[-1]
                if member.isfile() and _is_source(path):
                    extracted = tar.extractfile(member)
                    assert extracted is not None
                    files[path] = extracted.read().decode()
        return files
    tree = next((d for d in (DEFAULT_SOURCE_DIR, DEFAULT_SOURCE_DIR / "HAMi") if (d / "pkg").is_dir()), None)
    if tree is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"no HAMi source in {DEFAULT_SOURCE_DIR}")
        pytest.skip(f"no HAMi source in {DEFAULT_SOURCE_DIR}")
    return {str(p.relative_to(tree)): p.read_text() for p in tree.rglob("*.go") if _is_source(str(p.relative_to(tree)))}


def _is_source(path: str) -> bool:
    return path.startswith(("pkg/", "cmd/")) and path.endswith(".go") and not path.endswith("_test.go")


STRING = re.compile(r'^"([^"]*)"$')
CONSTANT = re.compile(r'^\s*(?:const\s+)?([A-Za-z_]\w*)\s*(?:string\s*)?=\s*"([^"]*)"', re.M)
LOCAL = r"\b{name}\s*:?=\s*([^\n]+)"
SPRINTF = re.compile(r'^fmt\.Sprintf\("([^"]*)",\s*(.+)\)$')
DEVICE_MAP = re.compile(r"^device\.(InRequestDevices|SupportDevices)\[(\w+)\]$")
REGISTERED = re.compile(r"device\.(InRequestDevices|SupportDevices)\[(\w+)\]\s*=\s*([^\n]+)")
ANNOINPUT = re.compile(r"\(\*anno[iI]nput\)\[([^\n]+?)\]\s*=[^=]")
PATCHED = re.compile(r"PatchPodAnnotations\(\s*[^,]+,\s*(\w+)\)")
MAP_LITERAL = r"\b{name}\s*:?=\s*map\[string\]string\{{([^}}]*)\}}"
RAW_PATCH = re.compile(r'"annotations":\s*map\[string\]string\{([^}]*)\}')
LABELS_CALL = re.compile(r"PatchPodLabels\(\s*[^,]+,\s*[^,]+,\s*map\[string\]string\{([^}]*)\}")
LITERAL_KEYS = re.compile(r"([\w.]+|\"[^\"]*\")\s*:")


class Unresolved(Exception):
    """A key expression the reader does not know how to resolve."""


class Reader:
    """Resolves a key expression of one file of HAMi to the key it names (``{chip}`` for a configured chip)."""

    def __init__(self, files: GoFiles) -> None:
        self.files = files
        self.constants: dict[str, dict[str, str]] = {}  # package directory -> name -> value
        for path, text in files.items():
            self.constants.setdefault(_package(path), {}).update(CONSTANT.findall(text))

    def resolve(self, expression: str, path: str) -> set[str]:
        """The keys ``expression`` in ``path`` may name: one, or each a device map may hold."""
        expression = expression.strip()
        if found := STRING.match(expression):
            return {found.group(1)}
        if found := DEVICE_MAP.match(expression):
            return self._registered(found.group(1), found.group(2), path)
        if found := SPRINTF.match(expression):
            template, word = found.groups()
            try:
                return {template.replace("%s", value) for value in self.resolve(word, path)}
            except Unresolved:
                return {template.replace("%s", CHIP)}  # commonWord: a chip of the device config
        if re.fullmatch(r"\w+\.\w+", expression):
            package, name = expression.split(".")
            for directory, names in self.constants.items():
                if directory.rsplit("/", 1)[-1] == package and name in names:
                    return {names[name]}
        if re.fullmatch(r"\w+", expression):
            if expression in self.constants.get(_package(path), {}):
                return {self.constants[_package(path)][expression]}
            local = re.search(LOCAL.format(name=re.escape(expression)), self.files[path])
            if local and local.group(1).strip() != expression:
                return self.resolve(local.group(1), path)
        raise Unresolved(f"{path}: {expression}")

    def _registered(self, table: str, word: str, path: str) -> set[str]:
        """The keys vendors register in ``device.InRequestDevices``/``SupportDevices`` under ``word``: its own
        package's registration of that constant; for a variable, each its package registers, or outside a
        vendor's package (a device plugin handed a device type) every vendor's."""
        registrations = [
            (where, key, value)
            for where, text in self.files.items()
            for name, key, value in REGISTERED.findall(text)
            if name == table
        ]
        own = [r for r in registrations if _package(r[0]) == _package(path)]
        constant = word in self.constants.get(_package(path), {})
        chosen = [r for r in own if self._word(r[1], r[0]) & self._word(word, path)] if constant else own
        chosen = chosen or ([] if constant else registrations)
        if not chosen:
            raise Unresolved(f"{path}: device.{table}[{word}] is registered nowhere")
        return {key for where, _, value in chosen for key in self.resolve(value, where)}

    def _word(self, word: str, path: str) -> set[str]:
        """What a device-map key names, when it is a constant (directly or through a local); else nothing."""
        try:
            return self.resolve(word, path)
        except Unresolved:
            return set()


def _package(path: str) -> str:
    return path.rsplit("/", 1)[0]


def writes(files: GoFiles) -> Iterator[Write]:
    """Every annotation and label HAMi's code writes on a Pod."""
    reader = Reader(files)
    for path, text in sorted(files.items()):
        for expression in ANNOINPUT.findall(text):
            yield from _each("annotation", reader.resolve(expression, path), path)
        for name in set(PATCHED.findall(text)):
            for expression in re.findall(rf"\b{re.escape(name)}\[([^\n]+?)\]\s*=[^=]", text):
                yield from _each("annotation", reader.resolve(expression, path), path)
            for body in re.findall(MAP_LITERAL.format(name=re.escape(name)), text):
                for expression in LITERAL_KEYS.findall(body):
                    yield from _each("annotation", reader.resolve(expression, path), path)
        for body in RAW_PATCH.findall(text):
            for expression in LITERAL_KEYS.findall(body):
                yield from _each("annotation", reader.resolve(expression, path), path)
        for body in LABELS_CALL.findall(text):
            for expression in LITERAL_KEYS.findall(body):
                yield from _each("label", reader.resolve(expression, path), path)
        patcher = re.search(r"func PatchPodAnnotations\(.*?\n}\n", text, re.S)
        for expression in re.findall(r"\blabel\[([^\]]+)\]\s*=[^=]", patcher.group(0) if patcher else ""):
            yield from _each("label", reader.resolve(expression, path), path)


def _each(kind: str, keys: set[str], where: str) -> Iterator[Write]:
    return (Write(kind, key, where) for key in sorted(keys))


def exceptions() -> dict[tuple[str, str], str]:
    """docs/rules.md's exception list: (kind, key) -> the reason."""
    section = RULES.read_text().split("#### Keys HAMi writes that the guard leaves alone\n", 1)[1].split("\n#", 1)[0]
    rows = re.findall(r"^\| `([^`]+)` \| (annotation|label) \| ([^|]+) \|$", section, re.M)
    assert rows, "the exception table of docs/rules.md"
    return {(kind, key): reason.strip() for key, kind, reason in rows}


def guarded() -> dict[str, frozenset[str]]:
    """The keys the shipped allocation guard refuses, by kind, read off its CEL lists."""
    policy = next(yaml.safe_load_all(GUARD.read_text()))
    variables = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}
    return {
        kind: frozenset(re.findall(r"'([^']+)'", variables[name].split("].filter", 1)[0]))
        for kind, name in (("annotation", "written"), ("label", "labelled"))
    }


@pytest.fixture(scope="module")
def found() -> list[Write]:
    return sorted(set(writes(hami_sources())))


def _examples(write: Write) -> list[str]:
    """The key as the webhook and the guard know it: for a per-chip key, each configured chip's; none when the
    table lacks it."""
    if write.kind == "label":
        return [write.key]
    return [key for key, row in SETTINGS.owned_annotations.rows.items() if row.key == write.key]


def test_hami_writes_are_read(found: list[Write]) -> None:
    """The reader finds what is known to be there, so an empty or broken read cannot pass for a guarded one."""
    keys = {(w.kind, w.key) for w in found}
    assert ("annotation", "hami.io/vgpu-devices-to-allocate") in keys
    assert ("annotation", f"hami.io/{CHIP}-devices-allocated") in keys
    assert ("annotation", "AWS_NEURON_IDS") in keys
    assert ("label", "hami.io/vgpu-node") in keys
    assert len(keys) > 40


def test_every_key_hami_writes_is_guarded_or_excepted(found: list[Write]) -> None:
    """Each is refused to a Pod's author by the webhook on create and by the shipped guard on every write, or
    listed with its reason; and the exception list names only keys HAMi writes and the guard leaves alone."""
    excepted = exceptions()
    guard = guarded()
    missing = []
    for write in found:
        if (write.kind, write.key) in excepted:
            continue
        examples = _examples(write)
        rules = SETTINGS.owned_annotations
        if write.kind == "annotation":
            ok = all(rules.forged({key: "x"}, {}) for key in examples)
        else:
            ok = bool(rules.forged({}, {write.key: "x"}))
        if not (examples and ok and all(key in guard[write.kind] for key in examples)):
            missing.append(f"{write.kind} {write.key} (written in {write.where})")
    assert not missing, "written by HAMi, neither guarded nor excepted in docs/rules.md:\n" + "\n".join(missing)
    written = {(w.kind, w.key) for w in found}
    for kind, key in excepted:
        assert (kind, key) in written, f"docs/rules.md excepts {kind} {key}, which HAMi does not write"
        assert key not in guard[kind], f"docs/rules.md excepts {kind} {key}, which the guard refuses"


def test_reader_fails_on_what_it_cannot_resolve() -> None:
    """A write through an expression of a new form stops the test instead of going unread."""
    files = {"pkg/device/x/device.go": "func (d *X) PatchAnnotations() {\n\t(*annoinput)[d.key()] = v\n}\n"}
    with pytest.raises(Unresolved, match=r"d\.key\(\)"):
        list(writes(files))


def test_reader_resolves_every_form() -> None:
    """Constants of the package and of another, device maps, map literals, locals, raw patches and labels."""
    files = {
        "pkg/util/types.go": 'const (\n\tNodeAnno = "hami.io/vgpu-node"\n\tRole = "hami.io/role"\n)\n',
        "pkg/device/x/device.go": (
            'const Word = "X"\nconst Picked = "X_IDX"\n'
            'func init() {\n\tdevice.SupportDevices[Word] = fmt.Sprintf("hami.io/%s-allocated", Word)\n}\n'
            "func (d *X) PatchAnnotations() {\n\t(*annoinput)[device.SupportDevices[Word]] = v\n"
            '\tkey := Picked\n\t(*annoinput)[key] = v\n\t(*annoinput)["plain"] = v\n}\n'
        ),
        "pkg/scheduler/s.go": (
            "func bind() {\n\tpatch := map[string]string{\n\t\tutil.NodeAnno: n,\n\t}\n"
            '\tpatch["late"] = t\n\tutil.PatchPodAnnotations(pod, patch)\n'
            "\tutil.PatchPodLabels(ns, name, map[string]string{util.Role: r})\n}\n"
        ),
        "pkg/util/util.go": "func PatchPodAnnotations(p *Pod, a map[string]string) error {\n"
        "\tlabel[NodeAnno] = v\n\treturn nil\n}\n",
        "pkg/plugin/server.go": '\tpatch := map[string]any{"annotations": map[string]string{"raw": s}}\n',
    }
    assert {(w.kind, w.key) for w in writes(files)} == {
        ("annotation", "hami.io/X-allocated"),
        ("annotation", "X_IDX"),
        ("annotation", "plain"),
        ("annotation", "hami.io/vgpu-node"),
        ("annotation", "late"),
        ("annotation", "raw"),
        ("label", "hami.io/role"),
        ("label", "hami.io/vgpu-node"),
    }
