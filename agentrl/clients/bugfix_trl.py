"""The BugFix gym as a TRL environment (Chapter 13).

TRL's GRPOTrainer takes `environment_factory=BugFixToolEnv`: it makes one
instance per rollout slot, calls `reset(**row)` with the dataset row before
each episode, offers every public method other than `reset` and `get_reward`
to the model as a tool (described from its signature and docstring), calls
the tool the model names with the model's arguments, and adds `get_reward()`
to the episode's reward (trl/trainer/grpo_trainer.py at f2cd577, 2026-07-24).

Each instance holds one session of a running `gym-server` (`cargo run --bin
gym-server -- --host 0.0.0.0 --max-sessions N`, with N at least the number of
rollouts in flight) through OpenEnv's MCP client: `openenv/session/create`
over POST /mcp, `reset` over the WebSocket /ws joined to that session, the
tools as `tools/call`. TRL never closes its environments; the server closes
a session left idle for its idle timeout.

    GYM_URL=http://127.0.0.1:8000 python train.py   # train.py passes environment_factory=BugFixToolEnv

Dataset rows name the task: `{"prompt": [...], "task": 3, "split": "train"}`.
The server refuses the held-out split unless started with `--held-out`, which
an evaluation server uses and a training server should not.
"""

import os

from openenv.core.mcp_client import MCPToolClient


class BugFixToolEnv:
    """One BugFix session; its public methods are the agent's four tools."""

    def __init__(self, base_url=None):
        self._client = MCPToolClient(base_url=base_url or os.environ.get("GYM_URL", "http://127.0.0.1:8000")).sync()
        self._client.connect()
        self.reward = 0.0
        self.done = False

    def reset(self, **row) -> str:
        """Start the episode of the row's task; the task's prompt is appended to the user message."""
        split = row.get("split", "train")
        if split not in ("train", "held_out"):
            raise ValueError(f"unknown split {split!r}")
        first = self._client.reset(task=int(row.get("task", 0)), split=split)
        self.reward, self.done = 0.0, False
        return first.observation.text

    def _call(self, name, **arguments):
        if self.done:
            raise ValueError("The episode is over.")
        step = self._client.call_tool(name, **arguments)
        self.done = bool(step["done"])
        if step["reward"] is not None:
            self.reward = float(step["reward"])
        return step["observation"]["text"]

    def read(self) -> str:
        """Show the function's source and the issue."""
        return self._call("read")

    def test(self) -> str:
        """Run the public tests on the current source and show which pass."""
        return self._call("test")

    def edit(self, op: str) -> str:
        """Apply one candidate edit from the task's menu.

        Args:
            op: The op of a menu entry, as the task's prompt lists them.
        """
        return self._call("edit", op=op)

    def submit(self) -> str:
        """End the episode; the reward is 1 if the source passes the hidden tests."""
        return self._call("submit")

    def get_reward(self) -> float:
        """The episode's reward: 1.0 for a submitted fix that passes the hidden tests, else 0.0."""
        return self.reward
