"""Chapter 13: the real OpenEnv client (openenv-core) plays the gym server.

Run by agentrl/tests/gym_server.rs as

    python openenv_client.py BASE_URL FIX_OP OPENENV_VERSION

It resets task 0 of the train split, plays the oracle's episode (read, test,
edit with the fix, test, submit), checks the reward of 1 and the end of the
episode, reads the state, checks that bad requests get the error codes they
should while the connection lives on, calls the HTTP routes, and runs
OpenEnv's validator of a running server. Any failed check raises, so the exit
status is non-zero.
"""

import json
import sys
import urllib.error
import urllib.request
from importlib import metadata

from openenv.core.generic_client import GenericEnvClient


def expect_error(call, code):
    """Run call(); it must fail with the server's error `code`."""
    try:
        call()
    except RuntimeError as err:  # how EnvClient reports a {"type": "error"} reply
        assert f"(code: {code})" in str(err), f"expected {code}, got {err}"
        return str(err)
    raise AssertionError(f"expected the error {code}, but the call succeeded")


def http(url, method="GET", body=None):
    """(status, JSON body) of one HTTP request; 4xx replies are returned, not raised."""
    data = None if body is None else body.encode()
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def main(url, fix_op, version):
    installed = metadata.version("openenv-core")
    assert installed == version, f"openenv-core {installed} is installed, the tests pin {version}"

    with GenericEnvClient(base_url=url).sync() as env:
        first = env.reset(task=0, split="train")
        assert first.reward is None and first.done is False, first
        assert first.observation["turn"] == 0, first.observation
        assert first.observation["text"].startswith("clamp("), first.observation["text"]

        script = ["read", "test", f"edit {fix_op}", "test", "submit"]
        for turn, call in enumerate(script, start=1):
            result = env.step({"message": f"<call> {call} </call>"})
            assert result.observation["turn"] == turn, result.observation
            assert result.done == (call == "submit"), (call, result)
        assert result.reward == 1.0, result
        assert result.observation["submitted"] and result.observation["hidden_pass"], result.observation
        assert not result.observation["hacked"], result.observation

        state = env.state()
        assert state["step_count"] == 5 and state["done"] is True, state
        assert state["task_id"] == "clamp-0" and state["split"] == "train" and state["task"] == 0, state
        assert state["episode_id"], state

        # Bad requests get their codes, and the connection lives on.
        expect_error(lambda: env.step({"message": "<call> read </call>"}), "EXECUTION_ERROR")
        expect_error(lambda: env.step({"mesage": "<call> read </call>"}), "VALIDATION_ERROR")
        expect_error(lambda: env.step({"message": "x" * 5000}), "VALIDATION_ERROR")
        expect_error(lambda: env.reset(task=10**6), "VALIDATION_ERROR")
        expect_error(lambda: env.reset(split="test"), "VALIDATION_ERROR")
        again = env.reset(task=1, split="held_out", episode_id="from-python")
        assert again.observation["turn"] == 0, again
        assert env.state()["episode_id"] == "from-python"

    status, health = http(f"{url}/health")
    assert (status, health) == (200, {"status": "healthy"}), (status, health)
    status, schema = http(f"{url}/schema")
    assert status == 200 and set(schema) == {"action", "observation", "state"}, schema
    status, meta = http(f"{url}/metadata")
    assert status == 200 and meta["name"] == "BugFixEnv", meta
    status, reset = http(f"{url}/reset", "POST", json.dumps({"task": 0}))
    assert status == 200 and reset["observation"]["text"] == first.observation["text"], reset
    status, bad = http(f"{url}/step", "POST", json.dumps({"action": {"message": 3}}))
    assert status == 422 and bad["code"] == "VALIDATION_ERROR", (status, bad)
    status, stateless = http(f"{url}/step", "POST", json.dumps({"action": {"message": "<call> read </call>"}}))
    assert status == 409 and stateless["code"] == "EXECUTION_ERROR", (status, stateless)

    # OpenEnv's validator of a running server (what `openenv validate --url`
    # runs; the CLI itself needs the extras this client install leaves out).
    from openenv.cli._validation import validate_running_environment

    report = validate_running_environment(url)
    failed = [c for c in report["criteria"] if not c.get("passed")]
    assert report["passed"] and not failed, failed

    print(f"openenv-core {installed}: validator passed {len(report['criteria'])} criteria; oracle episode reward {result.reward}, done {result.done}; errors and HTTP routes as expected")


if __name__ == "__main__":
    main(*sys.argv[1:4])
