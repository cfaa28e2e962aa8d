"""The deploy story of the learning loop (seed 002, section 6), shared by
`tests/learning/test_story.py` and `bench/learning_bench.py`.

- `StagingCluster`: build host, registry and staging cluster in memory, with the operations
  (`build_image`, `push_image`, `kubectl_apply`, `kubectl_rollout_status`,
  `kubectl_get_pods`, `http_check`) that `tests/learning/story_server.py` serves as a real
  MCP server. They refuse wrong use the way a cluster does: a tag that was never pushed
  fails the rollout with ErrImagePull, a wrong health path answers 404.
- `operator_model` and `reviewer_model`: what the fake OpenAI server answers. They are
  not scripts of fixed calls: each reply is decided from the request the product sent
  (the skills index in the system prompt, the skill_view result, the tool results, the
  review's snapshot), so a skill that never reached the model changes what it does. They
  call the cluster's operations by the names the request offers (`staging__build_image`
  from a tool server), and the reviewer's skill names the tools the snapshot shows were
  used (`metadata.hermes.requires_tools`).
"""

import hashlib
import json
import re
import threading
from dataclasses import dataclass, field

from tests.fakes import openai_server as fake_openai

REGISTRY = "registry.local"
SKILL_NAME = "k8s-staging-deploy"
HEALTH_PATHS = {"flask": "/health", "django": "/healthz/", "fastapi": "/health"}
APPS = {"shop": "flask", "billing": "django", "invoices": "django", "search": "fastapi"}
NOTHING_TO_SAVE = "Nothing to save."


def deploy_request(app: str, tag: str) -> str:
    """What a person types: 'Please deploy billing 2.0.1 to staging (our Django app).'"""
    framework = {"flask": "Flask", "django": "Django", "fastapi": "FastAPI"}[APPS[app]]
    return f"Please deploy {app} {tag} to staging (our {framework} app)."


# --- the cluster ------------------------------------------------------------------------


class ClusterError(Exception):
    """A refusal of the cluster; the engine turns it into an error result for the model."""


@dataclass
class Deployment:
    image: str
    ready: bool


@dataclass
class StagingCluster:
    """Build host, registry and staging cluster, in memory. Thread-safe: the engine runs
    each tool call in a worker thread."""

    built: set[str] = field(default_factory=set)
    pushed: set[str] = field(default_factory=set)
    deployments: dict[str, Deployment] = field(default_factory=dict)
    calls: list[tuple[str, dict]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def _app(self, app: str) -> str:
        if app not in APPS:
            raise ClusterError(f"no app named {app!r} in this cluster (apps: {', '.join(APPS)})")
        return app

    def build_image(self, app: str, tag: str) -> str:
        image = f"{REGISTRY}/{self._app(app)}:{tag}"
        self.built.add(image)
        return f"Built {image} on the build host (412 MB)."

    def push_image(self, image: str) -> str:
        if image not in self.built:
            raise ClusterError(f"no local image {image}: build it first")
        self.pushed.add(image)
        digest = hashlib.sha256(image.encode()).hexdigest()[:12]
        return f"Pushed {image} to {REGISTRY} (digest sha256:{digest})."

    def kubectl_apply(self, app: str, image: str) -> str:
        self._app(app)
        if not image.startswith(f"{REGISTRY}/{app}:"):
            raise ClusterError(f"{image} is not an image of {app}")
        # The pods pull the image when they start: whether it is in the registry decides.
        self.deployments[app] = Deployment(image=image, ready=image in self.pushed)
        return f"deployment.apps/{app} configured (image {image}); rollout started."

    def kubectl_rollout_status(self, app: str) -> str:
        deployment = self.deployments.get(self._app(app))
        if deployment is None:
            raise ClusterError(f'deployments.apps "{app}" not found')
        if not deployment.ready:
            raise ClusterError(
                f'deployment "{app}" exceeded its progress deadline: 0 of 2 updated replicas '
                "are available (ErrImagePull)"
            )
        return f'deployment "{app}" successfully rolled out (2 of 2 replicas available).'

    def kubectl_get_pods(self, app: str) -> str:
        deployment = self.deployments.get(self._app(app))
        if deployment is None:
            return f"No pods of {app}."
        if deployment.ready:
            return f"{app}-7d9f-1 1/1 Running\n{app}-7d9f-2 1/1 Running"
        reason = (
            f'ImagePullBackOff: failed to pull image "{deployment.image}": '
            f"manifest unknown: not found in {REGISTRY}"
        )
        return f"{app}-7d9f-1 0/1 {reason}\n{app}-7d9f-2 0/1 {reason}"

    def http_check(self, url: str) -> str:
        match = re.fullmatch(r"https?://([a-z0-9-]+)\.staging\.internal(/\S*)?", url)
        if not match:
            raise ClusterError(f"cannot resolve {url}: only <app>.staging.internal is routed")
        app, path = match.group(1), match.group(2) or "/"
        deployment = self.deployments.get(self._app(app))
        if deployment is None or not deployment.ready:
            raise ClusterError(f"{url}: 503 Service Unavailable (no ready pods of {app})")
        if path != HEALTH_PATHS[APPS[app]]:
            raise ClusterError(f"{url}: 404 Not Found")
        return f'{url}: 200 OK {{"status": "ok", "image": "{deployment.image}"}}'

    def run(self, name: str, arguments: dict) -> str:
        with self.lock:
            self.calls.append((name, arguments))
            return getattr(self, name)(**arguments)


def _string_parameters(*names: str) -> dict:
    return {
        "type": "object",
        "properties": {name: {"type": "string"} for name in names},
        "required": list(names),
        "additionalProperties": False,
    }


TOOL_SPECS = {
    "build_image": ("Build the app's container image on the build host.", ("app", "tag")),
    "push_image": ("Push a built image to the registry.", ("image",)),
    "kubectl_apply": ("Deploy an image of the app to the staging cluster.", ("app", "image")),
    "kubectl_rollout_status": ("Wait for the app's rollout and report it.", ("app",)),
    "kubectl_get_pods": ("List the app's pods and their state.", ("app",)),
    "http_check": ("GET a URL of the staging cluster and report the answer.", ("url",)),
}


# --- reading a request ------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """A tool call of the current turn as the model sees it, with the result it got."""

    name: str
    arguments: dict
    result: str

    @property
    def failed(self) -> bool:
        return self.result.startswith("Error")

    @property
    def operation(self) -> str:
        """The name without its tool server (`staging__build_image` -> `build_image`)."""
        return self.name.rpartition("__")[2]


def request_steps(body: dict) -> tuple[str, list[Step]]:
    """(the text of the last user message, the tool calls made since, with results)."""
    messages = body.get("messages") or []
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=0)
    after = messages[last_user + 1 :]
    results = {m.get("tool_call_id"): m.get("content") or "" for m in after if m["role"] == "tool"}
    steps = []
    for message in after:
        for call in message.get("tool_calls") or []:
            function = call["function"]
            steps.append(
                Step(
                    function["name"],
                    json.loads(function.get("arguments") or "{}"),
                    results.get(call["id"], ""),
                )
            )
    task = messages[last_user].get("content") or "" if messages else ""
    return task, steps


def offered_tools(body: dict) -> set[str]:
    return {tool["function"]["name"] for tool in body.get("tools") or []}


def indexed_deploy_skill(system_prompt: str) -> str | None:
    """The name of a deploy skill listed in the system prompt's skills index, if any."""
    _, _, index = system_prompt.partition("## Skills")
    for line in index.splitlines():
        match = re.match(r"- ([a-z0-9][a-z0-9._-]*)(?: \[[^\]]*\])?: (.*)", line)
        if match and "deploy" in match.group(2).lower():
            return match.group(1)
    return None


def _says_push_first(notes: str) -> bool:
    return any(
        "push" in line and "before" in line and "apply" in line
        for line in notes.lower().splitlines()
    )


def _known_health_path(notes: str, framework: str) -> str | None:
    match = re.search(rf"{framework} apps answer on `(/[^`]*)`", notes, re.IGNORECASE)
    return match.group(1) if match else None


def _last(steps: list[Step], name: str) -> int:
    return max((i for i, step in enumerate(steps) if step.operation == name), default=-1)


def offered_name(body: dict, operation: str) -> str:
    """The name the request offers for `operation` (a tool server's `<server>__<operation>`),
    or the bare name when nothing offers it (the call then fails as an unknown tool)."""
    for name in sorted(offered_tools(body)):
        if name == operation or name.endswith(f"__{operation}"):
            return name
    return operation


# --- the operator: the model of the turns ----------------------------------------------


def operator_model(body: dict) -> fake_openai.Reply:
    """The model answering people: deploys the app the last message names. It loads a
    deploy skill the index lists and follows what it says (push before apply, the health
    path); without one it applies first, reads the pods when the rollout fails, pushes and
    applies again. When it learnt something its skill did not say, it patches the skill."""
    task, steps = request_steps(body)
    match = re.search(r"deploy ([a-z][a-z0-9-]*) ([0-9][\w.]*) to staging", task)
    if not match or match.group(1) not in APPS:
        return fake_openai.text("Tell me which app and version to deploy to staging.")
    app, tag = match.groups()
    framework = {"flask": "Flask", "django": "Django", "fastapi": "FastAPI"}[APPS[app]]
    image, host = f"{REGISTRY}/{app}:{tag}", f"http://{app}.staging.internal"

    def call(tool: str, **arguments) -> fake_openai.Reply:
        name = offered_name(body, tool)
        return fake_openai.tool_calls([(f"{app}-{tag}-{len(steps) + 1}", name, arguments)])

    skill = indexed_deploy_skill(body["messages"][0]["content"])
    if skill and _last(steps, "skill_view") < 0:
        return call("skill_view", name=skill)
    viewed = next((s for s in steps if s.operation == "skill_view" and not s.failed), None)
    notes = viewed.result if viewed else ""

    if _last(steps, "build_image") < 0:
        return call("build_image", app=app, tag=tag)
    pushed = _last(steps, "push_image")
    if _says_push_first(notes) and pushed < 0:
        return call("push_image", image=image)
    applied = _last(steps, "kubectl_apply")
    if applied < 0 or pushed > applied:
        return call("kubectl_apply", app=app, image=image)
    rollout = _last(steps, "kubectl_rollout_status")
    if rollout < applied:
        return call("kubectl_rollout_status", app=app)
    if steps[rollout].failed:
        pods = _last(steps, "kubectl_get_pods")
        if pods < rollout:
            return call("kubectl_get_pods", app=app)
        if "manifest unknown" in steps[pods].result and pushed < 0:
            return call("push_image", image=image)
        return fake_openai.text(f"The rollout of {app} failed: {steps[rollout].result}")

    checks = [step for step in steps if step.operation == "http_check"]
    first_path = _known_health_path(notes, framework) or "/health"
    if not checks:
        return call("http_check", url=host + first_path)
    if checks[-1].failed:
        if "404" in checks[-1].result and len(checks) == 1:
            return call("http_check", url=f"{host}/healthz/")
        return fake_openai.text(f"{app} is rolled out but not healthy: {checks[-1].result}")
    ok_path = checks[-1].arguments["url"][len(host) :]
    done = f"Deployed {image} to staging: rolled out, {host}{ok_path} answers 200."
    learnt = ok_path != first_path
    patched = _last(steps, "skill_manage") >= 0
    if viewed is not None and learnt and not patched:
        steps_lines = (line for line in notes.splitlines() if re.match(r"\d+\. ", line))
        line = next((line for line in steps_lines if "http_check" in line), "")
        version = re.search(r"\(version (\d+)", notes)
        if line and version:
            return call(
                "skill_manage",
                action="patch",
                name=viewed.arguments["name"],
                base_version=int(version.group(1)),
                old_string=line,
                new_string=(
                    f"{line}\n   {framework} apps answer on `{ok_path}`, not on `{first_path}`"
                    " (a 404 there is the wrong path, not a failed deploy)."
                ),
                reason=f"{framework} health path learnt deploying {app}",
            )
    if patched:
        done += f" I noted the health path of {framework} apps in the {viewed.arguments['name']}"
        done += " skill."
    return fake_openai.text(done)


# --- the reviewer: the model of the background review ----------------------------------


SKILL_MD = """---
name: k8s-staging-deploy
description: Deploy an app version to the staging Kubernetes cluster and check it is healthy.
{requirements}---
# Deploy an app to staging (Kubernetes)

## When to use
Someone asks to deploy or release a version of one of our apps to staging.

## Steps
1. `build_image(app, tag)`: builds `registry.local/<app>:<tag>` on the build host only.
2. `push_image(image)`: push it to the registry.
3. `kubectl_apply(app, image)`.
4. `kubectl_rollout_status(app)`: wait until it is rolled out.
5. `http_check` on `http://<app>.staging.internal/health`: it must answer 200.
"""
PITFALL = """
## Pitfalls
- Push the image before kubectl apply: a tag that was never pushed fails the rollout with
  ErrImagePull (the pods show ImagePullBackOff, "manifest unknown"). Fix: push, then apply
  again.
"""


def used_tools(snapshot: str) -> list[str]:
    """The tool-server tools (`<server>__<tool>`) the snapshot shows were called, in the
    order of their first call."""
    found = re.findall(r"\((?:called |tool )(\w+__\w+)(?:\(| failed: )", snapshot)
    return list(dict.fromkeys(found))


def _requirements(snapshot: str) -> str:
    """The front matter lines naming the tools the procedure used, as Hermes writes them."""
    names = used_tools(snapshot)
    if not names:
        return ""
    return f"metadata:\n  hermes:\n    requires_tools: [{', '.join(names)}]\n"


def reviewer_model(body: dict) -> fake_openai.Reply:
    """The background reviewer: checks skills_list first; when the snapshot shows a task of
    5+ tool calls and no deploy skill exists, proposes one, with the pitfall when the
    snapshot shows the ErrImagePull failure and the push that fixed it; otherwise
    "Nothing to save."."""
    tools = offered_tools(body)
    _, steps = request_steps(body)
    if "skill_manage" not in tools:
        return fake_openai.text(NOTHING_TO_SAVE)  # a memory review: nothing personal here
    if not steps:
        return fake_openai.tool_calls([("review-1", "skills_list", {})])
    if steps[-1].name == "skill_manage":
        return fake_openai.text(f"Proposed the skill {SKILL_NAME} (staging deploys).")
    snapshot = body["messages"][1]["content"]
    counted = re.search(r"made (\d+) tool call\(s\) here, (\d+) of them failed", snapshot)
    calls = int(counted.group(1)) if counted else 0
    if calls < 5 or indexed_deploy_skill("## Skills\n" + steps[-1].result):
        return fake_openai.text(NOTHING_TO_SAVE)
    content = SKILL_MD.format(requirements=_requirements(snapshot))
    failed_rollout = re.search(
        r"\(tool (?:\w+__)?kubectl_rollout_status failed: [^\n]*ErrImagePull", snapshot
    )
    if failed_rollout and re.search(r"\(called (?:\w+__)?push_image\(", snapshot):
        content += PITFALL
    return fake_openai.tool_calls(
        [
            (
                "review-2",
                "skill_manage",
                {"action": "create", "name": SKILL_NAME, "category": "devops", "content": content},
            )
        ]
    )


# --- what the product stored --------------------------------------------------------------


def turn_tool_counts(turn) -> tuple[int, int]:
    """(tool calls, failed tool calls) of a turn, from its stored tool results."""
    from chats.models import Message

    results = Message.objects.filter(
        chat_id=turn.chat_id, role=Message.Role.TOOL, metadata__turn=turn.pk
    ).values_list("metadata", flat=True)
    metadata = list(results)
    return len(metadata), sum(1 for item in metadata if item.get("is_error"))
