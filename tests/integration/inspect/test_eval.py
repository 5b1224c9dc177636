"""An inspect_ai eval whose task says sandbox="runner" runs end to end: inspect finds the
provider through its entry point, a sample's solver and scorer work in the sandbox, and the
container is gone afterwards. The model is inspect's mockllm with its output and usage given:
without usage, mockllm counts tokens with tiktoken, which downloads its encoding (network)."""
from __future__ import annotations



def test_an_eval_with_sandbox_runner_runs_end_to_end(tmp_path, no_leaks, docker_client):
    from inspect_ai import Task, eval
    from inspect_ai.dataset import Sample
    from inspect_ai.model import ModelOutput, ModelUsage, get_model
    from inspect_ai.scorer import CORRECT, INCORRECT, Score, Target, accuracy, scorer
    from inspect_ai.solver import Generate, TaskState, solver
    from inspect_ai.util import sandbox

    @solver
    def work_in_the_sandbox():
        async def solve(state: TaskState, generate: Generate) -> TaskState:
            box = sandbox()
            await box.write_file("answer.txt", state.input_text.upper())
            res = await box.exec(["sh", "-c", "cat answer.txt; echo; id -u; pwd"])
            state.metadata["sandbox"] = res.stdout
            return await generate(state)

        return solve

    @scorer(metrics=[accuracy()])
    def answer_file():
        async def score(state: TaskState, target: Target) -> Score:
            text = await sandbox().read_file("answer.txt")
            return Score(value=CORRECT if text == target.text else INCORRECT, answer=text)

        return score

    task = Task(dataset=[Sample(input="hello runner", target="HELLO RUNNER")], solver=work_in_the_sandbox(),
                scorer=answer_file(), sandbox="runner")
    output = ModelOutput.from_content(model="mockllm/model", content="done")
    output.usage = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)
    model = get_model("mockllm/model", custom_outputs=[output])
    [log] = eval(task, model=model, log_dir=str(tmp_path / "logs"), display="none")
    assert log.status == "success", log.error
    sample = log.samples[0]
    assert sample.metadata["sandbox"] == "HELLO RUNNER\n1000\n/workspace\n"
    assert sample.scores["answer_file"].value == "C"
    assert log.results.scores[0].metrics["accuracy"].value == 1.0
    left = docker_client.api.containers(all=True, filters={"label": ["runner.role=inspect"]})
    assert not [c for c in left if c["Labels"].get("runner.inspect.task") == task.name]
