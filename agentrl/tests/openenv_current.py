"""Chapter 13: the current OpenEnv release (package `openenv`) against the gym server.

Run by agentrl/tests/gym_server.rs with .venv-openenv's Python as

    python openenv_current.py BASE_URL FIX_OP OPENENV_VERSION

1. `openenv validate --url BASE_URL --json`, OpenEnv's own command-line
   validator, must pass every criterion; `openenv validate deploy/openenv
   --level static` must pass the package description, whose declared tools
   and task counts must be what the server serves.
2. OpenEnv's MCP client (MCPToolClient) lists the four tools and plays the
   oracle's episode of task 0 through them: reward 1, done.
3. The TRL environment class (agentrl/clients/bugfix_trl.py) is inspected as
   TRL's GRPOTrainer inspects an environment_factory's instances (public
   methods other than reset and get_reward are the tools; transformers'
   get_json_schema must describe each), then plays the oracle's episode of a
   held-out task through its methods, as TRL calls them, and refuses a tool
   call after the episode ended.
Any failed check raises, so the exit status is non-zero.
"""

import inspect
import json
import os
import subprocess
import sys
import urllib.request
from importlib import metadata

from openenv.core.mcp_client import MCPToolClient

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "clients"))

from bugfix_trl import BugFixToolEnv  # noqa: E402


def main(url, fix_op, version):
    installed = metadata.version("openenv")
    assert installed == version, f"openenv {installed} is installed, the tests pin {version}"

    # 1. OpenEnv's validator, as a user runs it.
    cli = os.path.join(os.path.dirname(sys.executable), "openenv")
    ran = subprocess.run([cli, "validate", "--url", url, "--json"], capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, f"openenv validate failed ({ran.returncode}):\n{ran.stdout}\n{ran.stderr}"
    report = json.loads(ran.stdout)
    failed = [c for c in report["criteria"] if not c.get("passed")]
    assert report["passed"] and not failed, failed
    print(f"openenv validate --url: passed {len(report['criteria'])} criteria ({', '.join(c['id'] for c in report['criteria'])}), mode {report.get('mode')}")

    # 1b. The package description (deploy/openenv/openenv.yaml) at the static
    # level, and its declarations against what the server serves.
    package = os.path.join(HERE, "..", "..", "deploy", "openenv")
    ran = subprocess.run([cli, "validate", package, "--level", "static", "--json"], capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, f"openenv validate --level static failed ({ran.returncode}):\n{ran.stdout}\n{ran.stderr}"
    static = json.loads(ran.stdout)
    assert static["verdict"] == "pass", static["results"]
    declared = static["manifest"]["capabilities"]
    with urllib.request.urlopen(f"{url}/metadata", timeout=30) as reply:
        description = json.loads(reply.read())["description"]
    counts = f"{declared['declared_task_count']['train']} train tasks, {declared['declared_task_count']['held_out']} held-out tasks"
    assert counts in description, (counts, description)
    print(f"openenv validate deploy/openenv --level static: {static['verdict']}; declares {counts} and tools {declared['declared_tools']}")

    # 2. OpenEnv's MCP client: tools over POST /mcp, reset over /ws, one session.
    with MCPToolClient(base_url=url).sync() as env:
        names = [tool.name for tool in env.list_tools()]
        assert names == ["read", "test", "edit", "submit"] == declared["declared_tools"], names
        first = env.reset(task=0, split="train")
        assert first.observation.text.startswith("clamp("), first.observation
        steps = [env.call_tool("read"), env.call_tool("test"), env.call_tool("edit", op=fix_op), env.call_tool("test"), env.call_tool("submit")]
        last = steps[-1]
        assert [s["observation"]["turn"] for s in steps] == [1, 2, 3, 4, 5], steps
        assert last["reward"] == 1.0 and last["done"] is True and last["observation"]["hidden_pass"], last
        try:
            env.call_tool("edit", op="a b")
            raise AssertionError("a malformed op was accepted")
        except RuntimeError as err:
            assert "op" in str(err), err
    print(f"openenv {installed} MCPToolClient: tools {names}; oracle episode reward {last['reward']}, done {last['done']}")

    # 3. The TRL environment class, as GRPOTrainer inspects and calls it.
    from transformers.utils import get_json_schema

    env = BugFixToolEnv(base_url=url)
    methods = dict(inspect.getmembers(env, predicate=inspect.ismethod))
    assert "reset" in methods
    tools = {n: m for n, m in methods.items() if not n.startswith("_") and n not in ("reset", "get_reward")}
    assert sorted(tools) == ["edit", "read", "submit", "test"], sorted(tools)
    schemas = {n: get_json_schema(m) for n, m in tools.items()}
    assert schemas["edit"]["function"]["parameters"]["required"] == ["op"], schemas["edit"]
    assert schemas["read"]["function"]["parameters"].get("properties", {}) == {}, schemas["read"]
    prompt = env.reset(prompt=[{"role": "user", "content": "Fix the function."}], task=1, split="held_out")
    assert "Tools:" in prompt, prompt
    ops = [line for line in prompt.splitlines() if line.startswith("Tools:")]
    calls = [("read", {}), ("test", {})]
    outputs = [tools[name](**arguments) for name, arguments in calls]
    assert all(isinstance(o, str) and o for o in outputs), outputs
    print(f"TRL environment class: tools {sorted(tools)} with schemas from transformers {metadata.version('transformers')}; {ops[0] if ops else ''}")
    return env, tools


def oracle(env, tools, fix_op):
    tools["edit"](op=fix_op)
    tools["submit"]()
    assert env.get_reward() == 1.0, env.get_reward()
    try:
        tools["read"]()
        raise AssertionError("a tool call after the end was accepted")
    except ValueError as err:
        assert "over" in str(err), err
    print(f"TRL environment class: held-out episode reward {env.get_reward()}; a call after the end raises")


if __name__ == "__main__":
    env, tools = main(*sys.argv[1:4])
    oracle(env, tools, sys.argv[4])
