"""Dockerfile handling of the docker backend's builder (no engine needed)."""

from __future__ import annotations

from sandlot.sandbox.docker_build import (
    Instruction,
    _failing_line,
    final_base,
    image_key,
    override_image,
    rewrite_dockerfile,
)

DOCKERFILE = """\
# syntax comment
ARG BASE=debian:bookworm-slim
FROM debian:bookworm-slim AS build
RUN echo one \\
    && echo two
RUN <<EOF
echo heredoc body, not an instruction
FROM not-an-instruction
EOF
FROM --platform=linux/amd64 docker.io/library/python:3.12
COPY --from=build /x /y
"""


def test_overrides_replace_from_images_under_any_spelling():
    overrides = {"debian:bookworm-slim": "localhost/deb:1", "python:3.12": "localhost/py:1"}
    text, _ = rewrite_dockerfile(DOCKERFILE, overrides)
    assert "FROM localhost/deb:1 AS build" in text
    assert "FROM --platform=linux/amd64 localhost/py:1" in text
    assert "FROM not-an-instruction" in text, "heredoc bodies are left alone"
    assert override_image("library/debian:bookworm-slim", overrides) == "localhost/deb:1"
    assert override_image("debian:trixie", overrides) == "debian:trixie"
    assert override_image("alpine", {"alpine:latest": "a"}) == "a"


def test_instructions_keep_their_original_lines_and_stages():
    _, instructions = rewrite_dockerfile(DOCKERFILE, {})
    assert instructions == [
        Instruction(2, 1, 1), Instruction(3, 1, 1), Instruction(4, 1, 2), Instruction(6, 1, 3),
        Instruction(10, 2, 1), Instruction(11, 2, 2)]


def test_failing_line_from_podman_and_docker_step_lines():
    _, instructions = rewrite_dockerfile(DOCKERFILE, {})
    assert _failing_line("[1/2] STEP 2/3: RUN echo one\n", instructions) == 4
    assert _failing_line("[2/2] STEP 2/2: COPY --from=build /x /y\n", instructions) == 11
    assert _failing_line("Step 4/6 : RUN <<EOF\n", instructions) == 6
    assert _failing_line("STEP 1/2: FROM x\nSTEP 2/2: RUN y\n", instructions[1:]) == 4
    assert _failing_line("no steps at all", instructions) is None


def test_image_key_changes_with_every_input():
    base = image_key("d1", "main", "Dockerfile", {})
    assert base == image_key("d1", "main", "Dockerfile", {})
    assert len({base, image_key("d2", "main", "Dockerfile", {}),
                image_key("d1", "api", "Dockerfile", {}),
                image_key("d1", "main", "Dockerfile.dev", {}),
                image_key("d1", "main", "Dockerfile", {"a": "b"})}) == 5


def test_the_final_base_is_the_last_stage_s_image_through_stage_names():
    assert final_base(DOCKERFILE, {}) == "docker.io/library/python:3.12"
    assert final_base(DOCKERFILE, {"python:3.12": "localhost/py:1"}) == "localhost/py:1"
    staged = "FROM python:3.12 AS build\nRUN make\nFROM build AS test\nFROM test\n"
    assert final_base(staged, {}) == "python:3.12"
    assert final_base("FROM scratch\nCOPY x /x\n", {}) is None
    assert final_base("ARG V=3\nFROM python:${V}\n", {}) is None
    assert final_base("RUN <<EOF\nFROM inside-a-heredoc\nEOF\n", {}) is None


def test_build_args_are_part_of_the_image_key():
    assert image_key("d", "main", "Dockerfile", {}) == image_key("d", "main", "Dockerfile", {}, {})
    assert (image_key("d", "main", "Dockerfile", {}, {"V": "1"})
            != image_key("d", "main", "Dockerfile", {}, {"V": "2"}))
