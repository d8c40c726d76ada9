"""Issue 31: the configuration reference of docs/operator-guide.md and the
CONFIGURATION section of kibotos-agent(8) name exactly the keys the agent accepts,
each with the agent's default.

The keys and their defaults are what the agent itself prints (`--print-config`
without a file: the embedded defaults); then the agent, in --check-config mode,
confirms each key: it must not answer "unknown key" for any key the documents name,
and must take each non-empty documented default as a valid value. Needs no root and
starts nothing but the agent's check modes."""
import os
import re
import subprocess
import tempfile

import pytest

from kibotos_agent import SOURCE_ROOT, agent_binary

GUIDE = os.path.join(SOURCE_ROOT, "docs", "operator-guide.md")
MAN = os.path.join(SOURCE_ROOT, "packaging", "man", "kibotos-agent.8")
EMPTY = ("", '""', "empty", "[]")
DURATION = re.compile(r"(\d+(ms|s|m|h|d))+")


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def agent_env():
    """The environment without systemd's directories (they would move the defaults)."""
    return {k: v for k, v in os.environ.items() if k not in ("STATE_DIRECTORY", "RUNTIME_DIRECTORY")}


# ---- the agent's keys and defaults, as it prints them ----

def agent_keys():
    """{key: value text} of `kibotos-agent --print-config` (the embedded defaults)."""
    if not os.access(agent_binary(), os.X_OK):
        pytest.skip(f"no agent binary at {agent_binary()}")
    p = subprocess.run([agent_binary(), "--print-config"], capture_output=True, text=True, timeout=30,
                       env=agent_env())
    assert p.returncode == 0, p.stderr
    keys = {}
    for line in p.stdout.splitlines():
        key, sep, value = line.partition(":")
        assert sep and key and " " not in key, f"--print-config printed {line!r}"
        keys[key] = value.strip()
    return keys


# ---- what the documents say ----

def parse_duration_ms(text):
    """The agent's duration syntax: 1500ms, 90s, 1h30m, 7d, or bare seconds."""
    if re.fullmatch(r"\d+", text):
        return int(text) * 1000
    units = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
    parts = re.findall(r"(\d+)(ms|s|m|h|d)", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a duration: {text!r}")
    return sum(int(n) * units[u] for n, u in parts)


def same_value(documented, printed):
    """A documented default against the printed one: empty is empty; a duration is
    compared as a length of time (`24h` is `86400s`); anything else as text."""
    if documented in EMPTY or printed in EMPTY:
        return (documented in EMPTY) == (printed in EMPTY)
    if DURATION.fullmatch(printed):
        try:
            return parse_duration_ms(documented) == parse_duration_ms(printed)
        except ValueError:
            return False
    return documented == printed


def guide_reference():
    """{key: default text} from the table under "## Configuration reference"."""
    section = read(GUIDE).split("\n## Configuration reference\n", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        m = re.match(r"\| `([^`]+)` \| [^|]+ \| `([^`]*)` \|", line)
        if m:
            assert m.group(1) not in rows, f"{m.group(1)} twice in the guide"
            rows[m.group(1)] = m.group(2)
    return rows


def man_reference():
    """{key: default text} from kibotos-agent(8)'s CONFIGURATION section: a `.TP`, a
    `.B key` line, then "default \\fBVALUE\\fP" or "default empty"."""
    section = read(MAN).split("\n.SH CONFIGURATION\n", 1)[1].split("\n.SH ", 1)[0]
    rows = {}
    for m in re.finditer(r"^\.TP\n\.B (\S+)\n(.*?)(?=^\.TP\n|\Z)", section, re.S | re.M):
        d = re.search(r"default (?:\\fB(.*?)\\fP|(empty))", m.group(2))
        assert d, f"kibotos-agent.8: no default for {m.group(1)}"
        assert m.group(1) not in rows, f"{m.group(1)} twice in kibotos-agent.8"
        rows[m.group(1)] = (d.group(1) or d.group(2)).replace("\\-", "-")
    return rows


# ---- the agent binary, in --check-config mode ----

def yaml_for(key, value_text):
    """The YAML that sets `key` (sections nest one level per dot)."""
    parts = key.split(".")
    lines = [("  " * i) + p + ":" for i, p in enumerate(parts[:-1])]
    lines.append(("  " * (len(parts) - 1)) + parts[-1] + ": " + value_text)
    return "\n".join(lines) + "\n"


def check_config(tmp, key, value_text):
    """What `kibotos-agent --check-config` says of a file that sets only `key`."""
    path = os.path.join(tmp, "agent.yaml")
    with open(path, "w") as f:
        f.write(yaml_for(key, value_text))
    p = subprocess.run([agent_binary(), "--check-config", "--config", path], capture_output=True, text=True,
                       timeout=30, env=agent_env())
    return p.returncode, (p.stdout + p.stderr).strip()


def yaml_text(text):
    """A documented default as a YAML value (strings quoted so that "0660" stays text)."""
    return text if text in ("[]", "true", "false") or re.fullmatch(r"\d+", text) else f'"{text}"'


@pytest.fixture(scope="module")
def keys():
    k = agent_keys()
    assert len(k) >= 35, f"--print-config printed only {len(k)} keys: {sorted(k)}"
    return k


@pytest.mark.parametrize("name,reference", [("docs/operator-guide.md", guide_reference),
                                            ("kibotos-agent(8)", man_reference)])
def test_documents_name_exactly_the_agents_keys(keys, name, reference):
    documented = reference()
    missing = sorted(set(keys) - set(documented))
    extra = sorted(set(documented) - set(keys))
    assert not missing, f"{name} lacks keys the agent accepts: {missing}"
    assert not extra, f"{name} documents keys the agent does not have: {extra}"


@pytest.mark.parametrize("name,reference", [("docs/operator-guide.md", guide_reference),
                                            ("kibotos-agent(8)", man_reference)])
def test_documented_defaults_are_the_agents(keys, name, reference):
    wrong = {}
    for key, text in reference().items():
        if key not in keys:
            continue  # reported by the test above
        if not same_value(text, keys[key]):
            wrong[key] = f"documented {text!r}, the agent's default {keys[key]!r}"
    assert not wrong, f"{name}: {wrong}"


def test_the_agent_accepts_every_key_and_documented_default(keys):
    """The binary's own answer: every key of the table and of the documents is known
    to it, and each non-empty documented default is a value it takes."""
    if not os.access(agent_binary(), os.X_OK):
        pytest.skip(f"no agent binary at {agent_binary()}")
    documented = {**man_reference(), **guide_reference()}
    with tempfile.TemporaryDirectory() as tmp:
        # The probe can fail: a key the agent lacks is named as unknown.
        rc, out = check_config(tmp, "dataplane.no_such_key", "1")
        assert rc != 0 and "dataplane.no_such_key: unknown key" in out, out
        problems = {}
        for key in sorted(set(keys) | set(documented)):
            text = documented.get(key, "")
            empty = text in ("", '""', "[]", "empty")
            rc, out = check_config(tmp, key, '""' if empty else yaml_text(text))
            if f"{key}: unknown key" in out:
                problems[key] = "unknown to the agent"
            elif not empty and (rc != 0 or out != "config OK"):
                problems[key] = f"documented default {text!r} refused: {out}"
        assert not problems, problems


def man_options():
    """The flags kibotos-agent(8)'s OPTIONS section describes (each `.TP` entry's tag)."""
    section = read(MAN).split("\n.SH OPTIONS\n", 1)[1].split("\n.SH ", 1)[0]
    tags = re.findall(r"^\.TP\n\.B[IR]? (.*)$", section, re.M)
    return {f.replace("\\-", "-") for tag in tags for f in re.findall(r"\\-\\-[a-z\\-]+", tag)}


def test_the_agents_flags_are_the_man_pages():
    """kibotos-agent --help and kibotos-agent(8)'s OPTIONS name the same flags."""
    if not os.access(agent_binary(), os.X_OK):
        pytest.skip(f"no agent binary at {agent_binary()}")
    out = subprocess.run([agent_binary(), "--help"], capture_output=True, text=True, timeout=30).stdout
    in_help = set(re.findall(r"^  (--[a-z-]+)", out, re.M))
    in_man = man_options()
    assert len(in_help) >= 5, out
    assert in_help == in_man, f"only in --help: {sorted(in_help - in_man)}; only in the man page: {sorted(in_man - in_help)}"
