# ruff: noqa: RUF001  (CJK full-width punctuation is what these tests are about)
"""The built-in summarizer's structural floor (issue 36): the user's words, the calls the
agent made and the errors it met survive, in any language, told by structure — never
by English cue words. Pure."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from domain.compaction.bound import rollup_items
from domain.compaction.drafts import Fact, SummaryDraft, SummaryRequest
from domain.compaction.extractive import extract_draft
from domain.compaction.extractive import segmentation as seg
from domain.compaction.extractive.signals import signal_lines
from domain.compaction.validate import validate_draft
from tests.unit.test_extractive import COUNT, Seg, line_with

TRACEBACK = """Traceback (most recent call last):
  File "/repo/app/main.py", line 12, in <module>
    run()
  File "/repo/app/core.py", line 40, in run
    return load(cfg)
ValueError: {message}"""

# (user request, assistant prose, a long command, the error's message) per language
SESSIONS = {
    "zh": (
        "请修复导入模块时的错误，并且不要修改 config/settings.yaml 文件。",
        "我先运行测试看看错误。然后检查配置。",
        "cd /repo && python tools/import_rows.py --lang 导入 --limit 1 --quiet",
        "无效的配置项",
    ),
    "ru": (
        "Исправь ошибку импорта модуля, но не трогай файл config/settings.yaml.",
        "Сначала запущу тесты, чтобы увидеть ошибку. Потом проверю конфигурацию.",
        "cd /repo && python tools/import_rows.py --lang импорт --limit 1 --quiet",
        "неверный параметр конфигурации",
    ),
    "fr": (
        "Corrige l'erreur d'importation du module, sans modifier config/settings.yaml.",
        "Je lance d'abord les tests pour voir l'erreur. Ensuite je vérifie la configuration.",
        "cd /repo && python tools/import_rows.py --lang importation --limit 1 --quiet",
        "paramètre de configuration invalide",
    ),
    "de": (
        "Behebe den Importfehler des Moduls, aber ändere config/settings.yaml nicht.",
        "Ich führe zuerst die Tests aus, um den Fehler zu sehen. Dann prüfe ich die Konfiguration.",
        "cd /repo && python tools/import_rows.py --lang Einfuhr --limit 1 --quiet",
        "ungültiger Konfigurationswert",
    ),
}


def session(lang: str, rounds: int = 1, filler: int = 0) -> tuple[Seg, dict[str, str]]:
    """A coding session in ``lang``: a request, a step running a command whose output
    ends in a traceback, source listings, an answer; ``filler`` extra steps of noise."""
    request, prose, command, message = SESSIONS[lang]
    s = Seg()
    ids = {"request": s.user(request)}
    for r in range(rounds):
        ids["step"], (call,) = s.step(prose, ("bash", {"command": command}))
        out = "\n".join(
            [*(f"collected line {i}" for i in range(30)), TRACEBACK.format(message=message)]
        )
        ids["error"] = s.outcome(call, "bash", out)
        for k in range(filler):
            _, (c2,) = s.step(f"{prose} ({r}.{k})", ("read_file", {"path": f"src/m{k}.py"}))
            listing = "\n".join(f"    value_{k}_{i} = compute({i})" for i in range(60))
            s.outcome(c2, "read_file", "try:\n" + listing + "\nexcept AttributeError:\n    pass")
    ids["answer"] = s.answer(prose.split("。")[0].split(". ")[0])
    return s, ids


def draft(s: Seg, cap: int) -> SummaryDraft:
    req = s.request(cap)
    d = extract_draft(req)
    validate_draft(d, req.source_ids, 6 * cap)
    assert d.cited_ids() <= req.source_ids  # only this segment's records
    assert all("\n" not in f.statement for f in d.all_facts())  # one line each
    return d


@pytest.mark.spec("R11.4", "R11.7")
@pytest.mark.parametrize("lang", sorted(SESSIONS))
@pytest.mark.parametrize("cap", [300, 1200])
def test_any_language_keeps_the_request_the_command_and_the_error(lang: str, cap: int) -> None:
    request, _, command, message = SESSIONS[lang]
    s, ids = session(lang, filler=6)
    d = draft(s, cap)
    _, line = line_with(d, request)  # the user's words, verbatim
    assert line.source_ids == (ids["request"],) and line.statement == f"user: {request}"
    head = command.split(" --lang ")[0]
    section, line = line_with(d, "bash(")
    assert head[:20] in line.statement and line.source_ids == (ids["step"],)
    section, line = line_with(d, f"ValueError: {message}")
    assert section == "failures" and line.source_ids == (ids["error"],)
    assert "bash ok" in line.statement  # the stub: the tool, its status, the record id
    assert "AttributeError" not in " ".join(f.statement for f in d.failures)
    assert COUNT(d.text()) <= cap * 1.1


@pytest.mark.spec("R11.4")
@pytest.mark.parametrize("lang", sorted(SESSIONS))
def test_the_newest_requests_outlast_everything_else_when_the_bound_binds(lang: str) -> None:
    request = SESSIONS[lang][0]
    s = Seg()
    asked = [s.user(f"{n}: {request}") for n in range(12)]
    for n in range(12):
        _, (call,) = s.step(SESSIONS[lang][1], ("bash", {"command": SESSIONS[lang][2]}))
        s.outcome(call, "bash", "\n".join(f"row {i} of {n}" for i in range(50)))
    d = draft(s, 700)
    kept = [f.source_ids[0] for f in d.verified_facts if f.statement.startswith("user: ")]
    assert kept and kept == asked[len(asked) - len(kept) :]  # newest, in order
    assert len(kept) >= 6
    assert any("bash(" in f.statement for f in d.verified_facts)  # calls keep a share
    assert COUNT(d.text()) <= 700 * 1.1


@pytest.mark.spec("R11.4")
def test_a_long_command_is_shortened_from_the_middle_never_clipped_at_80() -> None:
    s = Seg()
    s.user("Run the exploit.")
    payload = "A" * 300
    command = (
        f"curl -s -X POST http://10.0.0.5:8080/login -d 'user=admin&pw={payload}' | tee out.txt"
    )
    _, (call,) = s.step("", ("bash", {"command": command}))
    s.outcome(call, "bash", "HTTP/1.1 200 OK")
    whole = draft(s, 800)
    _, line = line_with(whole, "curl -s -X POST http://10.0.0.5:8080/login")
    assert command in line.statement  # room enough: whole
    many = Seg()
    for n in range(25):
        many.user(f"Try number {n}.")
        _, (c,) = many.step("", ("bash", {"command": command.replace("login", f"login{n}")}))
        many.outcome(c, "bash", "HTTP/1.1 403 Forbidden")
    d = draft(many, 600)
    calls = [f.statement for f in d.verified_facts if f.statement.startswith("bash(")]
    assert calls and all("curl -s -X POST" in c and c.endswith('tee out.txt")') for c in calls)
    assert all("…" in c and len(c) < len(command) for c in calls)


@pytest.mark.spec("R11.4")
def test_errors_are_told_by_structure_not_by_words() -> None:
    lines = [
        "def load(cfg):",
        "    try:",
        "        return cfg.value",
        "    except AttributeError:",
        '        raise ValueError("no value")',
        "# handle the error case: timeouts, failures",
        "2024-05-07T10:41:07Z ERROR ledger.sync: LEDGER_E4127 currency mismatch",
        "E       KeyError: 'currency_code'",
        "FAILED tests/test_a.py::test_b - KeyError: 'currency_code'",
        "=========== 1 failed, 119 passed in 41.27s ===========",
        "Command exited with code 2",
        "src/main.c:12:5: error: expected ';' before '}' token",
        "Ошибка: файл не найден",  # words, no structure: a line like any other
    ]
    assert signal_lines(lines) == [6, 7, 8, 9, 10, 11]
    tb = TRACEBACK.format(message="bad").splitlines()
    assert signal_lines(tb) == list(range(len(tb)))


@pytest.mark.spec("R11.7")
def test_a_question_is_open_only_until_the_next_user_message() -> None:
    s = Seg()
    s.user("Add the retry.")
    s.answer("I added it to src/retry.py. Add file to the chat? (Y)es/(N)o")
    s.user("Yes.")
    s.answer("Would you like me to run the tests as well?")
    s.user("Ja, bitte.")
    _, (call,) = s.step("Running them.", ("bash", {"command": "pytest -q"}))
    s.outcome(call, "bash", "3 passed")
    last = s.answer("All green. Soll ich einen PR öffnen? 要不要也更新文档？")
    d = draft(s, 800)
    assert [(f.statement, f.source_ids) for f in d.unresolved_questions] == [
        ("Soll ich einen PR öffnen?", (last,)),
        ("要不要也更新文档？", (last,)),
    ]
    _, line = line_with(d, "Add file to the chat? (Y)es/(N)o")  # kept, as history
    assert line in d.verified_facts
    assert "All green." in line_with(d, "All green.")[1].statement


@pytest.mark.spec("R11.2")
def test_the_draft_fills_its_bound() -> None:
    s, _ = session("en" if "en" in SESSIONS else "fr", rounds=8, filler=8)
    for cap in (400, 800, 1600):
        used = COUNT(draft(s, cap).text())
        assert 0.7 * cap <= used <= 1.1 * cap, (cap, used)


@pytest.mark.spec("R11.3")
def test_five_thousand_records_make_one_deterministic_draft() -> None:
    # Its speed is measured by benchmarks.compaction (~0.3 s here), never asserted in a
    # test: a loaded CI machine would make such a test fail at random.
    s = Seg()
    for k in range(1250):
        s.user(f"Вопрос {k}: почему падает job_{k}?")
        _, (call,) = s.step(
            f"我来检查 job_{k}。", ("bash", {"command": f"pytest tests/job_{k}.py"})
        )
        s.outcome(call, "bash", TRACEBACK.format(message=f"job {k}") if k % 50 == 0 else "ok")
    req = s.request(4000)
    d = extract_draft(req)
    assert d.failures and d.verified_facts
    assert extract_draft(req).text() == d.text()  # deterministic


def test_segmentation_is_unicode() -> None:
    assert seg.sentences("先运行测试。然后检查配置！好吗？") == [
        "先运行测试。",
        "然后检查配置！",
        "好吗？",
    ]
    assert seg.sentences("Сначала тесты. Потом конфиг?") == ["Сначала тесты.", "Потом конфиг?"]
    assert seg.words("Größe ändern, Ошибка_2 修复") == ["grösse", "ändern", "ошибка_2", "修复"]
    assert seg.is_question("Souhaitez-vous continuer ?") and seg.is_question("好吗？」")
    assert seg.width("修复") > seg.width("ab") and seg.width("abc") == 3
    short = seg.shorten("cd /repo && " + "x" * 200 + " && make test", 40)
    assert short.startswith("cd /repo") and short.endswith("make test") and "…" in short
    assert seg.width(seg.shorten("修复" * 100, 50)) <= 50


SUMMARIZER_MODULES = (
    "answers.py", "bound.py", "extractive/draft.py", "extractive/fill.py", "extractive/floor.py",
    "extractive/salience.py", "extractive/segmentation.py", "extractive/signals.py",
)  # fmt: skip


def test_no_ascii_only_word_pattern_in_the_built_in_summarizer() -> None:
    root = Path(__file__).resolve().parents[2] / "domain" / "compaction"
    ascii_word = re.compile(r"\[(?:a-z|A-Za-z|a-zA-Z)[^\]]*\][+*{]")
    for name in SUMMARIZER_MODULES:
        assert not ascii_word.search((root / name).read_text()), name


def test_calls_render_their_values_whole_and_unescaped() -> None:
    s = Seg()
    s.user("写入文件")
    _, (call,) = s.step("", ("write_file", {"path": "docs/说明.md", "content": "第一行"}))
    s.outcome(call, "write_file", "ok")
    _, line = line_with(draft(s, 400), "write_file(")
    assert "docs/说明.md" in line.statement and "第一行" in line.statement
    assert json.dumps("第一行") not in line.statement


LIBS = ("orjson", "msgspec", "attrs", "polars", "anyio", "uvloop", "structlog", "tenacity")


def _verdict(template: str, n: int) -> str:
    """A decision of its own for each round: two libraries of ``LIBS`` (a verdict that
    differs from the previous one only in its numbers would repeat it)."""
    lib, old = LIBS[n % len(LIBS)], LIBS[(n // len(LIBS) + n + 1) % len(LIBS)]
    return template.format(lib=lib, old=f"{old}-{chr(97 + n % 26)}{chr(97 + n // 26)}")


@pytest.mark.spec("R11.4", "R11.7")
@pytest.mark.parametrize(
    ("ask", "narration", "verdict"),
    [
        (
            "Round {n}: port the billing parser.",
            "Loading the module.",
            "Verdict: {lib} over {old}.",
        ),
        ("第{n}轮：迁移账单解析器。", "正在加载模块。", "结论：选用{lib}而不是{old}。"),
    ],
)
def test_answers_outlast_step_narration_and_the_newest_stay_whole(
    ask: str, narration: str, verdict: str
) -> None:
    """An answer (an assistant message without calls) is what a run concluded: when the
    bound binds it goes after the steps' narration, the newest first — whatever words
    it uses (no cue word in ``verdict``)."""
    s = Seg()
    for n in range(60):
        s.user(ask.format(n=n))
        for k in range(2):
            _, (call,) = s.step(narration, ("read_file", {"path": f"src/m{n}/f{k}.py"}))
            s.outcome(call, "read_file", "\n".join(f"x_{i} = f({i})" for i in range(12)))
        s.answer(f"Round {n} done. " + _verdict(verdict, n))
    d = draft(s, 1200)
    text = d.text()
    for n in range(57, 60):  # the answers' share of the bound holds the newest three
        _, line = line_with(d, _verdict(verdict, n))
        assert line.statement.startswith("assistant: ")
    # "Round 58 done." differs from "Round 59 done." only in its number: no share for it
    assert sum(f"Round {n} done." in text for n in range(60)) <= 2
    assert text.count(narration) < text.count("assistant: ")


@pytest.mark.spec("R11.2", "R11.4")
@pytest.mark.parametrize("cap", [32, 64, 100])
def test_a_tiny_bound_still_keeps_the_users_request(cap: int) -> None:
    s, ids = session("zh", rounds=3, filler=2)
    d = draft(s, cap)
    _, line = line_with(d, "请修复")
    assert line.source_ids == (ids["request"],)
    assert COUNT(d.text()) <= max(cap, 32) * 1.5


@pytest.mark.spec("R11.2")
@pytest.mark.parametrize(
    "text",
    [
        "user: Hi, I'd like to know the sum of my gift card balances, please. [rec_00001]",
        'bash("cd /repo && python tools/import_rows.py --lang imp --limit 1 --quiet")',
        "- Je lance d'abord les tests pour voir l'erreur. Ensuite je vérifie la configuration.",
        "- Сначала запущу тесты, чтобы увидеть ошибку. Потом проверю конфигурацию.",
        "- assistant: 第57轮收尾。定价队列采用structlog替换orjson——团队一致同意。 [rec_0000348]",
        "(local_10 = 0; local_10 < 0x10; local_10 = local_10 + 1) { … → read(src/a_b.py)",
    ],
)
def test_width_is_close_to_a_tokenizers_count_in_any_script(text: str) -> None:
    """``width`` is what the floor spends: too high and a summary under-fills its bound
    (French was 40% over), too low and the job's fit drops whole entries."""
    estimate = seg.width(text) / seg.CHARS_PER_TOKEN
    assert 0.8 * COUNT(text) <= estimate <= 1.2 * COUNT(text)


def test_a_repeated_fragment_goes_first_and_the_newest_says_it() -> None:
    """A retried call that failed the same way each time: the newest call and error
    stay, the older repetitions go before anything said once."""
    s = Seg()
    s.user("Book the flight for the three of us.")
    ids = []
    for n in range(12):
        _, (call,) = s.step("", ("book", {"flight": "HAT023", "seats": 3, "try": "same"}))
        ids.append(s.outcome(call, "book", "Error: payment does not add up, paid 833", "error"))
        s.step(f"Adjusting the payment split, attempt {n}.", ("think", {"n": f"plan {n}"}))
    d = draft(s, 160)
    failed = [f.source_ids[0] for f in d.failures if "payment does not add up" in f.statement]
    assert failed and failed[-1] == ids[-1]
    assert len(failed) < len(ids)
    assert "Book the flight" in d.text()


def test_a_successful_results_stub_goes_before_the_calls() -> None:
    """'read ok' adds only the record to read it by: when the bound binds it goes before
    the call that shows what was read."""
    s = Seg()
    s.user("Read the modules.")
    for n in range(40):
        _, (call,) = s.step("", ("read_file", {"path": f"src/pkg/module_{n}.py"}))
        s.outcome(call, "read_file", "ok")
    text = draft(s, 200).text()
    assert text.count("read_file(src/pkg/module_") > text.count("read_file ok")


def test_a_roll_up_keeps_a_call_as_a_call_and_a_stub_as_a_stub() -> None:
    """Entries of an earlier summary: a step whose prose was left out starts with its
    call, and the floor keeps it as firmly as a call; a successful result's stub goes
    first."""
    facts = []
    for n in range(30):
        facts.append(Fact(f"cancel_reservation(K{n:04d}X)", (f"r{2 * n}",)))
        facts.append(Fact("cancel_reservation ok", (f"r{2 * n + 1}",)))
    parent = SummaryDraft(tuple(facts), (), (), (), (), ())
    items = rollup_items(parent)
    out = extract_draft(SummaryRequest(items, None, 120, "op:rollup:0"))
    text = out.text()
    assert "cancel_reservation(K0029X)" in text
    assert text.count("cancel_reservation(") > text.count("cancel_reservation ok")


def test_fit_drops_an_artifact_ref_an_entry_names_before_one_no_entry_names() -> None:
    """A roll-up's artifact list over the bound: a path a kept entry names is said
    already and goes first; a path no entry names is the only trace of that file."""
    from domain.compaction.bound import fit_draft

    def count(text: str) -> int:
        return len(text.split())

    facts = (Fact("read_file(src/app/main.py) ran", ("rec_1",)),)
    refs = ("docs/only/here.md", "src/app/main.py")
    draft = SummaryDraft(facts, (), (), (), refs, ())
    fitted, dropped = fit_draft(draft, count(draft.text()) - 1, count)
    assert dropped == 1
    assert fitted.work_artifact_refs == ("docs/only/here.md",)
    assert fitted.verified_facts == facts


@pytest.mark.parametrize(
    ("asks", "said"),
    [
        ("Who owns the billing ledger window?", "Round 0 finished; the ledger moved."),
        ("账单账本的窗口由谁负责？", "第0轮收尾。账本已迁移。"),
    ],
)
def test_a_roll_up_keeps_an_old_answer_that_asks_beside_the_newest_answers(
    asks: str, said: str
) -> None:
    """Answers of an earlier summary under a bound the user's words fill: the newest
    answers keep their share, and an older answer that asks (by its punctuation, in any
    language) keeps one of its own — it goes with the user's words of its age — where
    an answer as old that does not ask goes first."""
    facts = []
    for n in range(60):
        facts.append(Fact(f"user: move service {n} to the new queue and keep its API", (f"r{n}",)))
        if n == 40:
            facts.append(Fact(f"assistant: {said}", ("q0",)))
            facts.append(Fact(f"assistant: {said.replace('0', '1')} {asks}", ("q1",)))
        elif n % 3 == 0:
            facts.append(Fact(f"assistant: step {n} finished, tests green", (f"a{n}",)))
    parent = SummaryDraft(tuple(facts), (), (), (), (), ())
    text = extract_draft(SummaryRequest(rollup_items(parent), None, 600, "op:rollup:0")).text()
    assert asks in text
    assert said not in text
    assert "step 57 finished" in text


@pytest.mark.parametrize(
    ("open_q", "answered_q", "reply", "task"),
    [
        (
            "Who owns the billing ledger window?",
            "Who owns the search queue quota?",
            "Regarding the search queue quota: the infra team.",
            "move service {n} to the new queue and keep its API",
        ),
        (
            "账单账本的窗口由谁负责？",
            "搜索队列的配额由谁负责？",
            "关于搜索队列的配额：基础设施组负责。",
            "把服务{n}迁移到新队列，保持接口稳定。",
        ),
    ],
)
def test_a_question_nobody_took_up_outlasts_one_a_later_message_answered(
    open_q: str, answered_q: str, reply: str, task: str
) -> None:
    """Two old answers that ask, in one summary whose bound the user's words fill: the
    one a later user message takes up (repeats a run of its words, any script) leaves the
    asks share; the one nobody took up keeps it, and goes after the oldest requests."""
    s = Seg()
    for n in range(80):
        s.user(task.format(n=n) + (f" {reply}" if n == 30 else ""))
        if n == 10:
            s.answer(f"Round {n} finished. {answered_q}")
        elif n == 12:
            s.answer(f"Round {n} finished. {open_q}")
        elif n % 4 == 0:
            s.answer(f"Round {n} finished, tests green.")
    s.user("last question")
    text = extract_draft(s.request(600)).text()
    assert open_q in text
    assert answered_q not in text
    assert task.format(n=12) not in text  # a request as old went before it


def test_echo_runs_are_word_triples_or_six_unspaced_characters() -> None:
    assert seg.echo_grams("Who owns the billing ledger window?") >= {"billing ledger window"}
    assert not seg.echo_grams("Port the billing ledger") & seg.echo_grams(
        "Who owns billing ledger concurrency?"
    )
    asked = seg.echo_grams("账单账本的窗口由谁负责？")
    assert seg.echo_grams("关于账单账本的窗口：三十秒") & asked
    assert not seg.echo_grams("把账单账本迁移到新队列") & asked
