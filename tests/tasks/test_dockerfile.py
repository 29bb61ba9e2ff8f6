"""parse_dockerfile: what the local sandbox replays from environment/Dockerfile."""

from __future__ import annotations

import posixpath

import pytest

from sandlot.images.config import ImageConfig
from sandlot.tasks.dockerfile import CopyStep, DockerfilePlan, RunStep, expand, parse_dockerfile


def copies(text: str) -> list[CopyStep]:
    return [s for s in parse_dockerfile(text).steps if isinstance(s, CopyStep)]


def runs(text: str) -> list[RunStep]:
    return [s for s in parse_dockerfile(text).steps if isinstance(s, RunStep)]


# ---------------------------------------------------------------- FROM


def test_from_is_recorded_not_pulled() -> None:
    plan = parse_dockerfile("FROM python:3.11-slim AS base\n")
    assert plan.base_image == "python:3.11-slim"
    assert plan.steps == [] and plan.issues == []
    assert plan.workdir is None
    assert plan.env == {}


def test_arg_before_from_is_expanded_in_from() -> None:
    plan = parse_dockerfile("ARG BASE=debian:12\nFROM ${BASE}\n")
    assert plan.base_image == "debian:12"


def test_missing_from_is_an_issue() -> None:
    plan = parse_dockerfile("WORKDIR /app\n")
    assert [i.message for i in plan.issues] == ["no FROM instruction"]


# ---------------------------------------------------------------- ENV


def test_env_key_value_form_with_quotes_and_several_pairs() -> None:
    plan = parse_dockerfile('FROM x\nENV A=1 B="two words" C=\'single q\'\n')
    assert plan.env == {"A": "1", "B": "two words", "C": "single q"}


def test_env_legacy_space_form_keeps_the_rest_of_the_line() -> None:
    plan = parse_dockerfile("FROM x\nENV GREETING hello big world\n")
    assert plan.env == {"GREETING": "hello big world"}


def test_env_refers_to_earlier_env_and_same_line_pairs() -> None:
    plan = parse_dockerfile("FROM x\nENV ROOT=/opt/app\nENV BIN=$ROOT/bin LIB=${ROOT}/lib "
                            "BOTH=$BIN:$LIB\n")
    assert plan.env["BIN"] == "/opt/app/bin"
    assert plan.env["LIB"] == "/opt/app/lib"
    assert plan.env["BOTH"] == "/opt/app/bin:/opt/app/lib"


def test_later_env_overrides_earlier() -> None:
    plan = parse_dockerfile("FROM x\nENV MODE=dev\nENV MODE=prod\n")
    assert plan.env == {"MODE": "prod"}


def test_lowercase_instructions_are_accepted() -> None:
    plan = parse_dockerfile("from x\nenv A 1\nworkdir /w\n")
    assert plan.env == {"A": "1"}
    assert plan.workdir == "/w"
    assert plan.issues == []


def test_env_path_extension_keeps_the_standard_path() -> None:
    plan = parse_dockerfile("FROM x\nENV PATH=/opt/venv/bin:$PATH\n")
    parts = plan.env["PATH"].split(":")
    assert parts[0] == "/opt/venv/bin"
    assert "/usr/bin" in parts and "/bin" in parts


# ---------------------------------------------------------------- ARG and expansion


def test_arg_defaults_and_arg_without_default() -> None:
    plan = parse_dockerfile('FROM x\nARG VERSION=1.2\nARG QUOTED="a b"\nARG EMPTY\n'
                            "ENV V=$VERSION Q=${QUOTED} E=x${EMPTY}y\n")
    assert plan.env == {"V": "1.2", "Q": "a b", "E": "xy"}


def test_args_are_not_part_of_the_final_env_but_reach_run_steps() -> None:
    [run] = runs("FROM x\nARG PYVER=3.11\nRUN echo $PYVER\n")
    assert run.env == {"PYVER": "3.11"}
    assert parse_dockerfile("FROM x\nARG PYVER=3.11\n").env == {}


def test_run_step_env_is_a_snapshot_at_that_line() -> None:
    first, second = runs("FROM x\nENV A=1\nRUN one\nENV A=2 B=3\nRUN two\n")
    assert first.env == {"A": "1"}
    assert second.env == {"A": "2", "B": "3"}


@pytest.mark.parametrize(("text", "env", "expected"), [
    ("${X:-fallback}", {}, "fallback"),
    ("${X:-fallback}", {"X": ""}, "fallback"),
    ("${X:-fallback}", {"X": "set"}, "set"),
    ("${X-fallback}", {}, "fallback"),
    ("${X:+alt}", {"X": "set"}, "alt"),
    ("${X:+alt}", {}, ""),
    ("$X/${Y}", {"X": "a", "Y": "b"}, "a/b"),
    ("$UNSET-end", {}, "-end"),
    ("no vars", {}, "no vars"),
    ("$1 cost", {}, "$1 cost"),
])
def test_expand(text: str, env: dict[str, str], expected: str) -> None:
    assert expand(text, env) == expected


def test_default_expansion_in_env_and_workdir() -> None:
    plan = parse_dockerfile("FROM x\nARG APP\nENV HOME_DIR=${APP:-/srv/app} "
                            "MODE=${MODE:-test}\nWORKDIR ${HOME_DIR}/src\n")
    assert plan.env == {"HOME_DIR": "/srv/app", "MODE": "test"}
    assert plan.workdir == "/srv/app/src"


def test_arg_default_is_used_by_later_default_expansion() -> None:
    plan = parse_dockerfile("FROM x\nARG TAG=v2\nENV T=${TAG:-v1}\n")
    assert plan.env == {"T": "v2"}


# ---------------------------------------------------------------- WORKDIR


def test_relative_workdir_resolves_against_the_previous_one() -> None:
    plan = parse_dockerfile("FROM x\nWORKDIR /app\nWORKDIR src\nWORKDIR pkg\n")
    assert plan.workdir == "/app/src/pkg"


def test_relative_workdir_without_a_previous_one_starts_at_root() -> None:
    assert parse_dockerfile("FROM x\nWORKDIR app\n").workdir == "/app"


def test_workdir_with_dotdot_resolves_to_the_same_place() -> None:
    plan = parse_dockerfile("FROM x\nWORKDIR /app/src\nWORKDIR ../lib\n")
    assert plan.workdir is not None
    assert posixpath.normpath(plan.workdir) == "/app/lib"


def test_the_last_workdir_wins() -> None:
    plan = parse_dockerfile("FROM x\nWORKDIR /first\nRUN true\nWORKDIR /second\n"
                            "COPY a b\nWORKDIR /third\n")
    assert plan.workdir == "/third"


def test_steps_see_the_workdir_current_at_their_line() -> None:
    plan = parse_dockerfile("FROM x\nWORKDIR /one\nRUN a\nWORKDIR two\nRUN b\nCOPY f g\n")
    run_a, run_b, copy = plan.steps
    assert isinstance(run_a, RunStep) and run_a.workdir == "/one"
    assert isinstance(run_b, RunStep) and run_b.workdir == "/one/two"
    assert isinstance(copy, CopyStep) and copy.workdir == "/one/two"
    assert copy.dest == "/one/two/g"


# ---------------------------------------------------------------- COPY / ADD


def test_copy_with_chown_and_chmod() -> None:
    [step] = copies("FROM x\nWORKDIR /app\nCOPY --chown=1000:1000 --chmod=755 run.sh lib.py ./\n")
    assert step.sources == ["run.sh", "lib.py"]
    assert step.dest == "/app/"
    assert step.chown == "1000:1000"
    assert step.chmod == "755"
    assert step.extract is False


def test_copy_without_flags_has_no_owner_or_mode() -> None:
    [step] = copies("FROM x\nCOPY data.csv /srv/data.csv\n")
    assert (step.chown, step.chmod) == (None, None)
    assert step.dest == "/srv/data.csv"


def test_add_with_chmod_extracts_local_archives() -> None:
    [archive, plain] = copies("FROM x\nADD --chmod=644 data.tar.gz /opt/\nADD notes.txt /opt/\n")
    assert archive.extract is True and archive.chmod == "644"
    assert plain.extract is False


def test_copy_never_extracts_archives() -> None:
    [step] = copies("FROM x\nCOPY data.tar.gz /opt/\n")
    assert step.extract is False


def test_copy_json_form_keeps_spaces_in_names() -> None:
    [step] = copies('FROM x\nWORKDIR /app\nCOPY ["my file.txt", "other one.txt", "dest dir/"]\n')
    assert step.sources == ["my file.txt", "other one.txt"]
    assert step.dest == "/app/dest dir/"


def test_copy_expands_variables() -> None:
    [step] = copies("FROM x\nENV DST=/srv\nARG SRC=conf\nCOPY ${SRC}.ini $DST/\n")
    assert step.sources == ["conf.ini"]
    assert step.dest == "/srv/"


def test_stages_copy_from_each_other_by_name_or_number_or_from_an_image() -> None:
    plan = parse_dockerfile(
        "ARG GO=1.22\nFROM golang:${GO} AS Build\nENV CGO=0\nWORKDIR /src\nUSER dev\n"
        "RUN make\nFROM alpine:3 AS unused\nRUN true\nFROM build AS test\nRUN make test\n"
        "FROM debian:12\nCOPY --from=BUILD /src/app /usr/local/bin/\n"
        "COPY --from=2 /src/report /r\nCOPY --from=busybox:1 /bin/busybox /bin/\n")
    assert not plan.issues
    build, unused, test = plan.stages
    assert (build.name, build.base_image, unused.name) == ("build", "golang:1.22", "unused")
    assert (test.base_stage, test.base_image) == (0, None)
    # A stage FROM a stage goes on from where that one ended.
    [make_test] = test.steps
    assert isinstance(make_test, RunStep)
    assert (make_test.workdir, make_test.user, make_test.env["CGO"]) == ("/src", "dev", "0")
    sources = [(s.from_stage, s.from_image) for s in copies_of(plan)]
    assert sources == [(0, None), (2, None), (None, "busybox:1")]
    assert plan.needed_stages() == [0, 2]  # not the unused one
    assert plan.images == ["golang:1.22", "debian:12", "busybox:1"]
    assert plan.is_multi_stage and plan.stage_root_image(test) == "golang:1.22"
    assert not parse_dockerfile("FROM a AS one\nFROM b\nRUN true\n").is_multi_stage


@pytest.mark.parametrize(("text", "needle"), [
    ("FROM a\nCOPY --from=0 /x /y\n", "names this stage or a later one"),
    ("FROM a AS one\nFROM b\nCOPY --from=1 /x /y\n", "names this stage or a later one"),
    ("FROM a\nADD --from=a /x /y\n", "ADD has no --from"),
    ("RUN true\nFROM a\n", "RUN before the first FROM"),
    ("FROM a AS\n", "malformed FROM"),
])
def test_bad_stage_references_are_issues(text: str, needle: str) -> None:
    assert any(needle in i.message for i in parse_dockerfile(text).issues)


def copies_of(plan: DockerfilePlan) -> list[CopyStep]:
    return [s for s in plan.steps if isinstance(s, CopyStep)]


def test_copy_without_destination_is_an_issue() -> None:
    plan = parse_dockerfile("FROM x\nCOPY onlyone\n")
    [issue] = plan.issues
    assert issue.line == 2


# ---------------------------------------------------------------- RUN


def test_shell_form_run_goes_through_sh() -> None:
    [step] = runs("FROM x\nRUN apt-get update && apt-get install -y jq\n")
    assert step.argv == ["/bin/sh", "-c", "apt-get update && apt-get install -y jq"]
    assert step.line == 2


def test_json_form_run_is_exec_form() -> None:
    [step] = runs('FROM x\nRUN ["python3", "-c", "print(\'a b\')"]\n')
    assert step.argv == ["python3", "-c", "print('a b')"]


def test_run_with_a_mount_other_than_a_cache_is_refused() -> None:
    plan = parse_dockerfile("FROM x\nRUN --mount=type=secret,id=tok cat /run/secrets/tok\n"
                            "RUN --mount=source=x,target=/x true\nRUN --security=insecure true\n")
    assert plan.steps == []
    assert [issue.line for issue in plan.issues] == [2, 3, 4]
    assert "type=secret" in plan.issues[0].message and "type=bind" in plan.issues[1].message


def test_a_cache_mount_only_speeds_up_so_the_step_runs_without_it() -> None:
    [step] = runs("FROM x\nRUN --mount=type=cache,target=/root/.cache pip install x\n")
    assert step.argv == ["/bin/sh", "-c", "pip install x"] and step.network == "outbound"
    [offline] = runs("FROM x\nRUN --network=none make test\n")
    assert offline.network == "none"


def test_shell_changes_the_shell_of_later_shell_forms() -> None:
    plan = parse_dockerfile('FROM x\nRUN echo a\nSHELL ["/bin/bash", "-eo", "pipefail", "-c"]\n'
                            'RUN echo b | cat\nRUN ["echo", "c"]\nENTRYPOINT serve\n')
    assert plan.issues == []
    assert [step.argv for step in plan.steps] == [
        ["/bin/sh", "-c", "echo a"], ["/bin/bash", "-eo", "pipefail", "-c", "echo b | cat"],
        ["echo", "c"]]
    assert plan.entrypoint == ["/bin/bash", "-eo", "pipefail", "-c", "serve"]
    [issue] = parse_dockerfile("FROM x\nSHELL /bin/bash -c\n").issues
    assert issue.line == 2 and "JSON form" in issue.message


def test_a_heredoc_run_runs_its_body_with_the_shell_or_its_interpreter() -> None:
    text = ("FROM x\nRUN <<EOF\nset -e\necho one\necho two\nEOF\n"
            "RUN <<-'PY'\n\t#!/usr/bin/env python3\n\tprint('hi')\n\tPY\n"
            "RUN cat <<EOF > /etc/conf && cat <<'END' >> /etc/conf\na=$HOME\nEOF\nb=2\nEND\n"
            "ENV AFTER=1\n")
    plan = parse_dockerfile(text)
    assert plan.issues == [] and plan.env == {"AFTER": "1"}
    first, second, third = plan.steps
    assert first.argv == ["/bin/sh", "-c", "set -e\necho one\necho two"] and first.line == 2
    assert second.argv == ["/usr/bin/env", "python3", "/dev/stdin"]
    assert second.stdin == "#!/usr/bin/env python3\nprint('hi')\n"
    assert third.argv == ["/bin/sh", "-c", "cat <<EOF > /etc/conf && cat <<'END' >> /etc/conf"
                          "\na=$HOME\nEOF\nb=2\nEND"]


# ---------------------------------------------------------------- continuations, comments


def test_line_continuations_join_and_keep_the_start_line() -> None:
    text = ("FROM x\n"
            "\n"
            "RUN apt-get update \\\n"
            "    && apt-get install -y \\\n"
            "       curl \\\n"
            "       jq\n"
            "ENV A=1\n")
    [step] = runs(text)
    assert step.line == 3
    assert step.argv[2].split() == ["apt-get", "update", "&&", "apt-get", "install", "-y",
                                    "curl", "jq"]
    assert parse_dockerfile(text).env == {"A": "1"}


def test_comments_inside_a_continuation_are_dropped() -> None:
    text = ("FROM x\n"
            "RUN echo a \\\n"
            "    # a comment between continued lines\n"
            "    && echo b\n")
    [step] = runs(text)
    assert step.argv[2].split() == ["echo", "a", "&&", "echo", "b"]


def test_comments_and_blank_lines_do_not_shift_line_numbers() -> None:
    text = "# syntax=docker/dockerfile:1\n\n# base\nFROM x\n\n# later\nONBUILD RUN true\n"
    [issue] = parse_dockerfile(text).issues
    assert issue.line == 7


def test_user_runs_later_steps_and_is_the_default_user() -> None:
    plan = parse_dockerfile("FROM x\nRUN useradd app\nARG WHO=app\nUSER ${WHO}\nRUN id\n"
                            "USER root\nRUN id\nUSER 1000:staff\nRUN id\n")
    assert plan.issues == []
    assert [step.user for step in plan.steps] == [None, "app", None, "1000:staff"]
    assert plan.user == "1000:staff"
    assert parse_dockerfile("FROM x\nUSER app\nUSER 0\n").user is None


def test_a_user_that_is_not_a_name_is_an_issue() -> None:
    [issue] = parse_dockerfile("FROM x\nUSER a b\n").issues
    assert issue.line == 2 and "USER" in issue.message


def test_ignored_instructions_leave_no_steps_or_issues() -> None:
    plan = parse_dockerfile('FROM x\nLABEL a=b\nEXPOSE 80\nCMD ["bash"]\n'
                            'ENTRYPOINT ["/bin/sh"]\nVOLUME /data\nUSER root\n')
    assert plan.steps == [] and plan.issues == []


@pytest.mark.parametrize(("line", "needle"), [
    ("ONBUILD RUN true", "ONBUILD"),
    ("COPY --parents a /b/", "--parents"),
])
def test_unsupported_instructions_name_a_container_backend(line: str, needle: str) -> None:
    [issue] = parse_dockerfile(f"FROM x\n{line}\n").issues
    assert issue.line == 2
    assert needle in issue.message and "container backend" in issue.message


def test_the_last_entrypoint_is_the_images_in_either_form() -> None:
    plan = parse_dockerfile('FROM x\nENTRYPOINT ["/start.sh", "--quiet"]\nCMD ["python3"]\n')
    assert plan.entrypoint == ["/start.sh", "--quiet"] and plan.entrypoint_takes_args
    shell = parse_dockerfile('FROM x\nENTRYPOINT ["/a"]\n'
                             "ENTRYPOINT exec nginx -g 'daemon off;'\n")
    assert shell.entrypoint == ["/bin/sh", "-c", "exec nginx -g 'daemon off;'"]
    assert not shell.entrypoint_takes_args, "Docker gives a shell-form ENTRYPOINT no arguments"
    assert parse_dockerfile('FROM x\nENTRYPOINT ["/a"]\nENTRYPOINT []\n').entrypoint is None
    assert parse_dockerfile("FROM x\nCMD python3 -m http.server\n").entrypoint is None


def test_build_args_override_declared_arg_defaults_only() -> None:
    text = ("ARG TAG=12\nFROM debian:${TAG}\nARG TAG\nARG A=one\nARG B\n"
            'RUN echo "$TAG $A $B $UNDECLARED"\n')
    plain = parse_dockerfile(text)
    given = parse_dockerfile(text, {"TAG": "13", "A": "two", "B": "three", "UNDECLARED": "x"})
    assert plain.base_image == "debian:12" and given.base_image == "debian:13"
    [step] = given.steps
    assert {k: step.env[k] for k in ("TAG", "A", "B")} == {"TAG": "13", "A": "two", "B": "three"}
    assert "UNDECLARED" not in step.env
    assert plain.steps[0].env["A"] == "one" and plain.steps[0].env["B"] == ""


def test_build_arg_values_parse_like_docker_build() -> None:
    from sandlot.sandbox import parse_build_args

    assert parse_build_args(["A=1", "B=", "C=x=y", "HOME_DIR"], {"HOME_DIR": "/h"}) == {
        "A": "1", "B": "", "C": "x=y", "HOME_DIR": "/h"}
    for bad in (["=1"], ["1A=2"], ["A-B=1"], ["MISSING"]):
        with pytest.raises(ValueError):
            parse_build_args(bad, {})


def test_a_copy_heredoc_writes_its_body_as_a_file() -> None:
    text = ("FROM x\nWORKDIR /app\nARG NAME=world\n"
            "COPY <<EOF conf.txt\nhello $NAME\nEOF\n"
            "COPY --chmod=600 <<'A' <<-B data.txt /etc/many/\nliteral $NAME\nA\n\tb\n\tB\n")
    plan = parse_dockerfile(text)
    assert plan.issues == []
    one, two = plan.steps
    assert one.dest == "/app/conf.txt" and one.sources == []
    assert one.inline == (("EOF", "hello world\n"),)
    assert two.sources == ["data.txt"] and two.dest == "/etc/many/" and two.chmod == "600"
    assert two.inline == (("A", "literal $NAME\n"), ("B", "b\n"))


def test_steps_start_as_the_base_image_does_until_the_dockerfile_says_otherwise() -> None:
    """Parsed with the FROM image's config: its WORKDIR, USER and ENV hold for the steps,
    as in `docker build`; a later WORKDIR is relative to it and `USER root` takes root back."""
    base = ImageConfig(env={"PATH": "/opt/tool/bin:/usr/bin", "APP_HOME": "/srv"},
                       workdir="/home/runner/work", user="runner")
    plan = parse_dockerfile("FROM example/base:1\nRUN id\nENV PATH=/x:$PATH\n"
                            "WORKDIR sub\nRUN pwd\nUSER root\nRUN whoami\n",
                            bases={"example/base:1": base})
    first, second, third = plan.steps
    assert isinstance(first, RunStep) and isinstance(second, RunStep)
    assert isinstance(third, RunStep)
    assert (first.workdir, first.user) == ("/home/runner/work", "runner")
    assert (second.workdir, second.user) == ("/home/runner/work/sub", "runner")
    assert second.env["PATH"] == "/x:/opt/tool/bin:/usr/bin"
    assert third.user is None and plan.user is None
    assert plan.workdir == "/home/runner/work/sub"
    untouched = parse_dockerfile("FROM example/base:1\nRUN true\n",
                                 bases={"example/base:1": base})
    assert (untouched.user, untouched.workdir) == ("runner", None)  # the image decides
    assert parse_dockerfile("FROM example/base:1\n").user is None  # config not known yet
