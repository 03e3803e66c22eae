"""One version: ``setup.cfg`` declares it; the image tag the manifests and the README name and the changelog
follow it (the release workflow reads it from ``setup.cfg``: tests/manifests/test_release.py runs its check), so
a release bumps one line and this test names every other place that must follow.
"""

from __future__ import annotations

import re

import yaml

from testbed import ROOT, version

IMAGE = re.compile(r"\bhami-webhook:([0-9][^\s\"'`]*)")
NEW_TAG = re.compile(r"\bnewTag: *([^\s,}]+)")


def manifest_images() -> dict[str, str]:
    """Every container image in the manifests, by file and place."""
    found: dict[str, str] = {}

    def walk(node: object, where: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "image" and isinstance(value, str):
                    found[where] = value
                walk(value, f"{where}.{key}")
        elif isinstance(node, list):
            for i, item in enumerate(node):
                walk(item, f"{where}[{i}]")

    for path in sorted((ROOT / "manifests").rglob("*.yaml")):
        for n, doc in enumerate(yaml.safe_load_all(path.read_text())):
            walk(doc, f"{path.relative_to(ROOT)}#{n}")
    return found


def test_the_manifests_name_the_image_of_this_version() -> None:
    images = manifest_images()
    assert len(images) >= 5, "the webhook's Deployment and certgen's Job and CronJob containers"
    assert set(images.values()) == {f"hami-webhook:{version()}"}, images


def test_kustomize_image_entries_keep_the_tag() -> None:
    """An ``images:`` entry in the manifests' kustomizations would override the tag: if one appears, it names the
    same version."""
    for path in (ROOT / "manifests").rglob("kustomization.yaml"):
        for entry in yaml.safe_load(path.read_text()).get("images", []):
            assert entry.get("newTag", version()) == version(), path


def test_the_readme_names_the_image_of_this_version() -> None:
    readme = (ROOT / "README.md").read_text()
    tags = IMAGE.findall(readme) + NEW_TAG.findall(readme)
    assert tags and set(tags) == {version()}, tags


def test_the_changelog_has_a_section_for_this_version() -> None:
    """Released: a ``## [<version>]`` section. Not yet: ``## [Unreleased]`` says it will be released as this
    version, so the upgrade notes under it are keyed to the version an admin will install."""
    changelog = (ROOT / "CHANGELOG.md").read_text()
    sections = re.findall(r"^## \[([^\]]+)\](.*?)(?=^## |\Z)", changelog, re.M | re.S)
    assert sections, "no version sections"
    names = [name for name, _ in sections]
    if version() not in names:
        assert names[0] == "Unreleased", names
        assert f"To be released as **{version()}**" in sections[0][1]
