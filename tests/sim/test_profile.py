"""Profiles: the shipped ones load, bad ones fail with one line naming the file and the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from tokenload.sim.profile import DEFAULT_PROFILE, ProfileError, list_profiles, load_profile

pytestmark = pytest.mark.simulated_time


def test_shipped_profiles_load() -> None:
    names = list_profiles()
    assert {"a40-qwen2.5-7b", "h100-llama3.1-8b", "h200-llama3.1-70b-fp8"} <= set(names)
    assert DEFAULT_PROFILE == "a40-qwen2.5-7b"
    for name in names:
        profile = load_profile(name)
        assert profile.name == name
        assert profile.model.weight_bytes < profile.gpu.memory_bytes


def test_a40_facts() -> None:
    profile = load_profile("a40-qwen2.5-7b")
    # KV cache per token in bf16: 2 x 28 layers x 4 heads x 128 x 2 bytes (reference notes).
    assert profile.model.kv_bytes_per_token == 57_344
    assert profile.model.weight_bytes == pytest.approx(15.2e9, rel=0.01)
    assert profile.gpu.memory_bandwidth_bytes_per_s == 696e9


def write_variant(tmp_path: Path, old: str, new: str) -> Path:
    text = (Path(__file__).parents[2] / "tokenload/sim/profiles/a40-qwen2.5-7b.yaml").read_text()
    assert old in text
    path = tmp_path / "foo.yaml"
    path.write_text(text.replace(old, new))
    return path


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            "memory_bandwidth_bytes_per_s: 696.0e+9",
            "memory_bandwidth_bytes_per_s: abc",
            "profile foo.yaml: gpu.memory_bandwidth_bytes_per_s: expected a positive number, got 'abc'",
        ),
        (
            "memory_bandwidth_bytes_per_s: 696.0e+9",
            "memory_bandwidth_bytes_per_s: -5",
            "profile foo.yaml: gpu.memory_bandwidth_bytes_per_s: expected a positive number, got -5",
        ),
        (
            "prefill_matmul: 0.95",
            "prefill_matmul: 1.5",
            "profile foo.yaml: efficiency.prefill_matmul: expected a number in (0, 1], got 1.5",
        ),
        (
            "  num_layers: 28\n",
            "",
            "profile foo.yaml: model.num_layers: missing (expected a positive integer)",
        ),
        (
            "  num_layers: 28\n",
            "  num_layers: 28\n  num_experts: 8\n",
            "profile foo.yaml: model.num_experts: unknown field (allowed: name, params, ",
        ),
        (  # a misspelt key is unknown and its right spelling missing: the unknown one is named
            "  decode_bandwidth:",
            "  decode_bandwith:",
            "profile foo.yaml: efficiency.decode_bandwith: unknown field; "
            "did you mean decode_bandwidth? (allowed: ",
        ),
        (
            "matmul_dtype: bf16",
            "matmul_dtype: int4",
            "profile foo.yaml: model.matmul_dtype: expected 'bf16' or 'fp8', got 'int4'",
        ),
    ],
)
def test_bad_field_gives_one_line_naming_file_and_field(
    tmp_path: Path, old: str, new: str, message: str
) -> None:
    with pytest.raises(ProfileError) as info:
        load_profile(write_variant(tmp_path, old, new))
    text = str(info.value)
    assert "\n" not in text
    assert text.startswith(message)


def test_invalid_yaml_and_non_mapping(tmp_path: Path) -> None:
    bad = tmp_path / "broken.yaml"
    bad.write_text("gpu: [1, 2\n")
    with pytest.raises(ProfileError, match=r"^profile broken\.yaml: invalid YAML at line \d+"):
        load_profile(bad)
    bad.write_text("- 1\n")
    with pytest.raises(
        ProfileError, match=r"^profile broken\.yaml: expected a mapping at the top level, got list$"
    ):
        load_profile(bad)
    with pytest.raises(ProfileError, match=r"^profile \S*missing\.yaml: cannot read"):
        load_profile(tmp_path / "missing.yaml")


def test_unknown_profile_name_lists_the_available_ones() -> None:
    with pytest.raises(ProfileError) as info:
        load_profile("x")
    assert str(info.value) == f"unknown profile 'x'; available: {', '.join(list_profiles())}"
