"""The codebook of the data export: every column of every exported file, and every questionnaire item.

The exporter fills its tables by the column names declared here, so the codebook
and the files cannot drift apart: a column without an entry here cannot be
exported. Columns that depend on the study definition (``T1_completed_at``,
``T1_pu_1`` ...) are generated from it. ``pii`` marks what ``exclude_pii``
drops: usernames and every free-text column (message text, open answers,
admin-written reasons, profile text).

Pure: no Flask, no database.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from services.study.definition import Study, Task
from services.text.catalogs import CATALOGS
from services.text.cells import NUMBER_DECIMALS

INTEGER, NUMBER, STRING, DATETIME, BOOLEAN, JSON_TEXT = (
    "integer", "number", "string", "datetime (UTC, YYYY-MM-DD HH:MM:SS)", "boolean (1/0)", "JSON text")


def _likert_anchors(item: dict[str, Any]) -> str:
    """The scale's ends in the words the questionnaire page showed (the catalogs' q.likert_low / q.likert_high),
    English then Chinese."""
    return "; ".join(f"{item['min']} = {CATALOGS.text(lang, 'q.likert_low')} … "
                     f"{item['max']} = {CATALOGS.text(lang, 'q.likert_high')}" for lang in ("en", "zh"))


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    description: str
    pii: bool = False
    # questionnaire columns only
    instrument: str = ""
    item_id: str = ""
    scale: str = ""
    wording_zh: str = ""
    wording_en: str = ""


def _c(name: str, type_: str, description: str, pii: bool = False) -> Column:
    return Column(name, type_, description, pii)


CODE = _c("participant_code", STRING, "Pseudonymous participant id (never the username); links every file.")
GROUP = _c("memory_group", STRING, "Memory condition the participant was assigned to (L1 sensory, L2 working, "
                                   "L3 gist, L4 hybrid; S1/R1 when enabled); see study_config.json.")

STATIC_COLUMNS: dict[str, list[Column]] = {
    "participants.csv": [
        CODE, GROUP,
        _c("username", STRING, "Login name chosen at registration.", pii=True),
        _c("language", STRING, "Interface and chat language (zh or en)."),
        _c("external_id", STRING, "Participant id of the recruiting panel (e.g. Prolific PID) for panel entries; "
                                  "empty otherwise and after erasure.", pii=True),
        _c("status", STRING, "active; withdrawn (data kept; no further tasks); or erased (on request: only this "
                             "row's code, group, assignment and enrolment/erasure times are left)."),
        _c("registered_at", DATETIME, "Account creation."),
        _c("consent_at", DATETIME, "Time the consent form was accepted."),
        _c("consent_version", STRING, "Version of the consent text accepted."),
        _c("study_version", INTEGER, "Published study version (study_versions, the admin's study editor) the "
                                     "participant enrolled under; task_sessions.csv has each task's own."),
        _c("test_participant", BOOLEAN, "True for a test (pilot) participant forced into a group by an admin; "
                                        "exported only when asked for (include_test=1)."),
        _c("withdrawn_at", DATETIME, "Time of the withdrawal (the participant's own, or an admin's record of "
                                     "it); empty if active. Kept when the withdrawal was followed by erasure."),
        _c("withdrawn_by", STRING, "Who withdrew the participant: participant (their own withdrawal on the study "
                                   "pages; erased_at and erasure_reason show when they also asked for erasure) "
                                   "or admin (recorded in the console, with withdrawn_reason); empty if active."),
        _c("withdrawn_reason", STRING, "Reason recorded with the withdrawal (free text).", pii=True),
        _c("last_active_at", DATETIME, "Last message sent by the participant."),
        _c("assigned_at", DATETIME, "Time the memory condition was drawn."),
        _c("assignment_block", INTEGER, "Permuted block the condition was drawn from (0-based)."),
        _c("assignment_slot", INTEGER, "Position within that block (0-based)."),
        _c("tasks_done", INTEGER, "Number of tasks completed (chat and questionnaire)."),
        _c("user_messages", INTEGER, "Messages the participant sent, all tasks."),
        _c("assistant_replies", INTEGER, "Replies stored for the participant, all tasks."),
        _c("erased_at", DATETIME, "Time an admin erased the participant's data on request; empty otherwise."),
        _c("erasure_reason", STRING, "Reason recorded with the erasure (free text).", pii=True),
        _c("pasted_messages", INTEGER, "Messages that contained pasted text (pasted_chars > 0 in messages.csv)."),
        _c("focus_losses", INTEGER, "Times the task page lost focus while chatting, all tasks (sum over messages)."),
        _c("attention_checks", INTEGER, "Attention-check items answered."),
        _c("attention_failures", INTEGER, "Attention-check items answered other than instructed."),
    ],
    "task_sessions.csv": [
        _c("task_session_id", INTEGER, "Id of this attempt at a task; messages.csv and questionnaires link to it."),
        CODE, GROUP,
        _c("task_id", STRING, "Task (T1-T4)."),
        _c("attempt", INTEGER, "Attempt number; above 1 only after an admin reset an earlier attempt."),
        _c("status", STRING, "in_progress, done, reset (voided by an admin, kept for audit) or abandoned."),
        _c("phase", STRING, "chat, questionnaire or closed."),
        _c("started_at", DATETIME, "Task start."),
        _c("chat_ended_at", DATETIME, "End of the chat phase (finished, time up or abandoned)."),
        _c("completed_at", DATETIME, "Questionnaire submitted; the task is done."),
        _c("last_activity_at", DATETIME, "Last action in this attempt."),
        _c("active_seconds", NUMBER, "Active chat time in study seconds, idle gaps excluded (in pilot mode "
                                     "real seconds are scaled up to study seconds); the same as "
                                     "active_study_seconds, kept under its old name."),
        _c("active_study_seconds", NUMBER, "Active chat time in study seconds (what the task timer counts), idle "
                                           "gaps excluded."),
        _c("active_real_seconds", NUMBER, "Active chat time in real (wall-clock) seconds: active_study_seconds x "
                                          "timer_scale (manifest.json deployment.timer_scale, from "
                                          "PILOT_TIMER_SCALE or PILOT_DAY_SECONDS/86400 in pilot mode; 1 otherwise). "
                                          "Compare with chat_wall_seconds, also real."),
        _c("idle_gap_count", INTEGER, "Pauses longer than the idle-gap threshold (not counted as active)."),
        _c("idle_seconds", NUMBER, "Total length of those pauses, real seconds."),
        _c("chat_wall_seconds", NUMBER, "Real (wall-clock) seconds from start to the end of the chat phase, "
                                        "idle gaps included."),
        _c("end_reason", STRING, "Why the chat ended: finished, time_up, abandoned or reset."),
        _c("reset_reason", STRING, "Reason an admin gave for resetting this attempt (free text).", pii=True),
        _c("consolidation_status", STRING, "Memory consolidation of this session: pending, running, done, "
                                           "failed or n/a."),
        _c("user_messages", INTEGER, "Messages the participant sent in this attempt."),
        _c("assistant_replies", INTEGER, "Replies stored in this attempt."),
        _c("outcome", STRING, "For a done task: complete, or incomplete (fewer participant messages or less "
                              "active time than the study's minimum engagement: no completion code, paid only "
                              "with payments.pay_incomplete)."),
        _c("study_version", INTEGER, "Published study version this attempt started and ran under (a version "
                                     "published mid-task applies from the participant's next task)."),
        _c("questionnaire_order", "JSON array", "The order this attempt's questionnaire was shown in, as "
                                                "[[instrument, [item ids]], ...], when the study file randomises it "
                                                "(tasks.<id>.randomise_instruments, "
                                                "instruments.<name>.randomise_items); empty when it was shown in the "
                                                "file's order."),
    ],
    "panel_entries.csv": [
        _c("panel_entry_id", INTEGER, "Id of this arrival through the panel's link (increasing in time)."),
        CODE, GROUP,
        _c("at", DATETIME, "Time of the arrival."),
        _c("outcome", STRING, "created (new account), returned (a known participant from a browser that entered "
                              "as them before), refused (a known id from another browser), full (the enrolment "
                              "cap was reached), not_allowed (an id not on the allowlist) or allowlist_unavailable "
                              "(the allowlist file could not be used, so no new id was let in) or closed (an id "
                              "that withdrew or was erased). No code for refused, full, not_allowed, "
                              "allowlist_unavailable and closed: they are stored apart from any account."),
        _c("via", STRING, "How a return was recognised: device (the browser's device cookie) or session (still "
                          "logged in); new for a created account."),
    ],
    "messages.csv": [
        _c("message_id", INTEGER, "Message id (increasing in time)."),
        CODE, GROUP,
        _c("task_id", STRING, "Task the message belongs to."),
        _c("task_session_id", INTEGER, "Task attempt (task_sessions.csv)."),
        _c("created_at", DATETIME, "Time the message was stored."),
        _c("role", STRING, "user (the participant) or assistant (a reply)."),
        _c("text", STRING, "Message text as sent or generated.", pii=True),
        _c("text_chars", INTEGER, "Length of the text in characters (kept when text is excluded)."),
        _c("reply_to_id", INTEGER, "For a reply: the participant message it answers."),
        _c("provider", STRING, "Reply: provider that produced it (offline = template responder, not an LLM)."),
        _c("model", STRING, "Reply: model name reported by the provider."),
        _c("temperature", NUMBER, "Reply: sampling temperature requested."),
        _c("max_tokens", INTEGER, "Reply: maximum reply length requested."),
        _c("prompt_tokens", INTEGER, "Reply: prompt size reported by the provider (offline: characters)."),
        _c("completion_tokens", INTEGER, "Reply: reply size reported by the provider (offline: characters)."),
        _c("latency_ms", NUMBER, "Reply: time the provider took, milliseconds."),
        _c("providers_tried", INTEGER, "Reply: provider attempts made (more than 1 means a fallback answered)."),
        _c("context_profile_version", INTEGER, "Reply: version of the gist profile in its memory context "
                                               "(profiles.csv); empty if none."),
        _c("context_recent_turns", INTEGER, "Reply: verbatim turns from earlier tasks in its memory context."),
        _c("context_recalled_count", INTEGER, "Reply: memories recalled by the forgetting curve (L4)."),
        _c("recalled_memory_ids", STRING, "Reply: message_id of each recalled memory, separated by ';'."),
        _c("embedding_model", STRING, "User message: embedder used at consolidation."),
        _c("importance_score", NUMBER, "User message: lasting personal information it carries, 0-1."),
        _c("emotional_intensity", NUMBER, "User message: emotional intensity score I, 0-1."),
        _c("self_disclosure", NUMBER, "User message: self-disclosure depth score D, 0-1."),
        _c("value_relevance", NUMBER, "User message: value relevance score V, 0-1."),
        _c("emotional_salience", NUMBER, "User message: 0.4*I + 0.4*D + 0.2*V."),
        _c("consolidation_g", NUMBER, "User message: current consolidation coefficient g of the forgetting curve."),
        _c("recall_count", INTEGER, "User message: times it was recalled (L4)."),
        _c("last_recall_at", DATETIME, "User message: last recall (L4)."),
        _c("consolidated_at", DATETIME, "User message: time its memory fields were computed."),
        _c("typing_ms", INTEGER, "User message: milliseconds from the first key press, input, composition or "
                                 "paste event in the message box to "
                                 "sending, as measured by the participant page; empty if not reported."),
        _c("keystrokes", INTEGER, "User message: key presses (keydown) in the message box while writing it "
                                  "(an input method's keys count when the browser reports them; dictation and "
                                  "autocomplete have none: see input_kind)."),
        _c("pasted_chars", INTEGER, "User message: characters pasted into the message box while writing it; "
                                    "above 0 flags text possibly written elsewhere (e.g. by another chatbot)."),
        _c("focus_losses", INTEGER, "User message: times the page lost focus (another tab or window) since the "
                                    "previous message of the task was sent, or since the chat page opened."),
        _c("input_events", INTEGER, "User message: `input` events in the message box while writing it (each "
                                    "insertion or deletion, from a key, an input method, dictation or a paste); "
                                    "empty if not reported."),
        _c("composition_events", INTEGER, "User message: input-method compositions finished (compositionend) "
                                          "while writing it, e.g. pinyin turned into Chinese characters; empty if "
                                          "not reported."),
        _c("input_kind", STRING, "User message: where most of its characters came from, as the participant page "
                                 "saw it: typed (key presses), composed (an input method's compositions), pasted, "
                                 "dictated (inserted with no key press or composition: voice dictation, autocomplete, "
                                 "an on-screen keyboard's suggestion) or unknown (no input seen, e.g. a restored "
                                 "draft); empty if not reported."),
    ],
    "questionnaires_long.csv": [
        CODE, GROUP,
        _c("task_id", STRING, "Task after which the questionnaire was answered."),
        _c("task_session_id", INTEGER, "Task attempt (task_sessions.csv)."),
        _c("instrument", STRING, "Instrument (scale) the item belongs to."),
        _c("item_id", STRING, "Item id; wording and scale per item below and in codebook.md."),
        _c("item_type", STRING, "likert, ios, choice, text or attention (an instructed-response check)."),
        _c("value", NUMBER, "Answer to a rating item (a choice item: the chosen option's value); empty for "
                            "free-text items."),
        _c("text_answer", STRING, "Answer to a free-text item.", pii=True),
        _c("submitted_at", DATETIME, "Time the questionnaire was submitted."),
        _c("attention_passed", BOOLEAN, "Attention items: 1 if the instructed answer was given, 0 if not; empty "
                                        "for other items."),
    ],
    "questionnaires_wide.csv": [
        CODE, GROUP,
        _c("language", STRING, "Language the questionnaire was shown in."),
        _c("status", STRING, "Participant status at export (active, withdrawn or erased)."),
    ],
    "profiles.csv": [
        _c("profile_version_id", INTEGER, "Row id of this profile version."),
        CODE, GROUP,
        _c("kind", STRING, "gist (L3/L4 profile), s1_summary (S1) or r1_memory (R1)."),
        _c("version", INTEGER, "Version number per participant and kind; every consolidation adds one."),
        _c("task_id", STRING, "Task whose conversation produced this version."),
        _c("created_at", DATETIME, "Time the version was written."),
        _c("source", STRING, "What produced it (a provider name, or offline-rules)."),
        _c("consolidation_run_id", INTEGER, "Consolidation run that wrote it (consolidation_runs.csv)."),
        _c("rendered_chars", INTEGER, "Length of the rendered text given to the model."),
        _c("rendered", STRING, "The text placed in the prompt (gist capped at the configured length).", pii=True),
        _c("content_json", JSON_TEXT, "The full structured content (dimensions and items, tagged with tasks).",
           pii=True),
    ],
    "recall_events.csv": [
        _c("recall_event_id", INTEGER, "Row id."),
        CODE, GROUP,
        _c("task_id", STRING, "Task in which the recall was attempted."),
        _c("query_message_id", INTEGER, "Participant message that served as the query (messages.csv)."),
        _c("memory_message_id", INTEGER, "Earlier participant message considered (messages.csv)."),
        _c("memory_task_id", STRING, "Task the considered memory came from."),
        _c("rank", INTEGER, "Rank among the top-k most similar memories (1 = most similar)."),
        _c("cosine", NUMBER, "Raw cosine similarity from the embedder."),
        _c("r", NUMBER, "Relevance after the calibration mapping, 0-1."),
        _c("t", NUMBER, "Elapsed time since creation or last recall, in the configured time unit."),
        _c("g_before", NUMBER, "Consolidation coefficient g before this event."),
        _c("g_after", NUMBER, "g after this event (grows only when recalled)."),
        _c("p", NUMBER, "Forgetting-curve recall probability (1 - exp(-r*exp(-t/g))) / (1 - exp(-1))."),
        _c("p_final", NUMBER, "p plus the salience bonus, capped at 1."),
        _c("salience", NUMBER, "Emotional salience of the memory."),
        _c("recalled", BOOLEAN, "1 if the memory entered the context: p_final reached the threshold (recalled_by "
                                "curve), or directed retrieval or the rehearsal route brought it back."),
        _c("recalled_by", STRING, "What recalled it: curve (the forgetting curve), directed (an explicit request "
                                  "to remember, memory.recall.directed_retrieval) or rehearsal (reached through an "
                                  "earlier exchange that recalled it, memory.recall.rehearsal_route); empty when not "
                                  "recalled."),
        _c("via_message_id", INTEGER, "Rehearsal route: the candidate message (messages.csv) that had recalled this "
                                      "memory and through which it was reached; empty otherwise."),
        _c("created_at", DATETIME, "Time of the event."),
    ],
    "consolidation_runs.csv": [
        _c("run_id", INTEGER, "Row id."),
        CODE, GROUP,
        _c("task_session_id", INTEGER, "Task attempt consolidated."),
        _c("task_id", STRING, "Task consolidated."),
        _c("trigger", STRING, "task_end, sweep (scheduler) or manual (admin or script)."),
        _c("status", STRING, "running, succeeded, failed or skipped."),
        _c("started_at", DATETIME, "Run start."),
        _c("finished_at", DATETIME, "Run end."),
        _c("duration_seconds", NUMBER, "finished_at - started_at, seconds."),
        _c("provider", STRING, "Provider (or offline-rules) that produced the profile."),
        _c("error", STRING, "Error of a failed run (may quote model output).", pii=True),
        _c("steps_json", JSON_TEXT, "What each step did (may include profile changes).", pii=True),
    ],
    "codebook.csv": [
        _c("file", STRING, "Exported file the row describes."),
        _c("column", STRING, "Column (or JSON key) in that file."),
        _c("type", STRING, "Value type."),
        _c("description", STRING, "What the column holds."),
        _c("pii", BOOLEAN, "1 if the column is removed by the exclude-PII option."),
        _c("instrument", STRING, "Questionnaire columns: instrument of the item."),
        _c("item_id", STRING, "Questionnaire columns: item id (for questionnaires_long.csv: the value of item_id "
                              "this row describes)."),
        _c("scale", STRING, "Questionnaire columns: response scale."),
        _c("wording_zh", STRING, "Questionnaire columns: item wording in Chinese."),
        _c("wording_en", STRING, "Questionnaire columns: item wording in English."),
    ],
}

# Keys of the JSON-lines file with each reply's exact memory context and prompt (not a CSV).
REPLY_CONTEXT_KEYS: list[Column] = [
    _c("message_id", INTEGER, "Reply (messages.csv)."),
    CODE, GROUP,
    _c("task_id", STRING, "Task of the reply."),
    _c("memory_context", "JSON object", "Structured memory the reply was built from: profile, recent_turns, "
                                        "recalled (with r, t, p, g), recall_candidates, summary, notes (each {code, "
                                        "params}: the catalogs' admin.note.<code>).", pii=True),
    _c("prompt", "JSON array", "The exact messages sent to the model (system prompt with memory, history).",
       pii=True),
    _c("params", "JSON object", "Generation parameters and provider details."),
    _c("attempts", "JSON array", "Every provider tried for this reply, with its outcome."),
]


def _localised(value: Any, language: str) -> str:
    if isinstance(value, dict):
        return value.get(language) or ""
    return value or ""


def item_scale(item: dict[str, Any]) -> str:
    shown_when = item.get("show_if")
    scale = _scale_text(item)
    labels = item.get("labels")
    if labels:  # the study file's words for points of the scale, in place of the default anchors
        words = "; ".join(f"{p} = {_localised(t, 'en')} / {_localised(t, 'zh')}" for p, t in labels.items())
        scale = (f"{scale}, points labelled {words}" if item.get("type") == "attention"
                 else f"{item.get('type', 'likert')} {item.get('min', 1)}-{item.get('max', 7)} ({words})")
    if shown_when:  # a display condition (study file: show_if): empty when the item was not shown
        scale += f"; shown only when {shown_when['item']} {shown_when['op']} {shown_when['value']}, empty otherwise"
    return scale


def _scale_text(item: dict[str, Any]) -> str:
    kind = item.get("type", "likert")
    if kind == "likert":
        return f"likert {item['min']}-{item['max']} ({_likert_anchors(item)})"
    if kind == "ios":
        return f"IOS circles {item['min']}-{item['max']} (1 = separate, {item['max']} = almost overlapping)"
    if kind == "choice":
        options = "; ".join(f"{o['value']} = {_localised(o.get('label'), 'en') or _localised(o.get('label'), 'zh')}"
                            for o in item.get("options", []))
        return f"choice ({options})"
    if kind == "attention":
        return f"attention check, instructed answer {item['expected']} (any other answer fails)"
    if kind == "text":
        limit = item.get("max")
        return f"free text, up to {limit} characters" if limit else "free text"
    return kind


def study_items(study: Study) -> dict[str, tuple[str, Mapping[str, Any]]]:
    """item_id -> (instrument name, item definition), over every instrument of the study."""
    items: dict[str, tuple[str, Mapping[str, Any]]] = {}
    for name, instrument in study.instruments.items():
        for item in instrument.items:
            items[item["id"]] = (name, item)
    return items


def task_items(study: Study, task: Task) -> list[tuple[str, Mapping[str, Any]]]:
    """(instrument, item) in the order the task's questionnaire shows them."""
    return [(name, item) for name in task.questionnaire for item in study.instruments[name].items]


def _item_column(name: str, instrument: str, item: dict[str, Any], description: str) -> Column:
    return Column(
        name=name, type=STRING if item.get("type") == "text" else NUMBER, description=description,
        pii=item.get("type") == "text", instrument=instrument, item_id=item["id"], scale=item_scale(item),
        wording_zh=_localised(item.get("text"), "zh"), wording_en=_localised(item.get("text"), "en"),
    )


def columns_for(file: str, study: Study) -> list[Column]:
    """Every column of ``file`` in export order, before PII exclusion."""
    columns = list(STATIC_COLUMNS[file])
    task_ids = study.task_ids
    if file == "participants.csv":
        columns += [_c(f"{t}_completed_at", DATETIME, f"Time task {t} was completed; empty if not done (yet).")
                    for t in task_ids]
        columns.append(_c("implausible_typing_messages", INTEGER,
                          f"Messages flagged implausible_typing in messages.csv ({_typing_rule(study)})."))
    elif file == "messages.csv":
        columns += typing_columns(study) + REPLY_TIMING_COLUMNS
    elif file == "task_sessions.csv":
        columns += EXPOSURE_COLUMNS
    elif file == "panel_entries.csv":
        columns += [_c(f"param_{name}", STRING, f"The panel's {name} parameter on the entry link (study file: "
                                                "panel.session_parameters); empty if the link had none.",
                       pii=True)
                    for name in study.panel.session_parameters]
    elif file == "questionnaires_wide.csv":
        for task in study.tasks:
            for instrument, item in task_items(study, task):
                columns.append(_item_column(
                    f"{task.id}_{item['id']}", instrument, item,
                    f"Answer to {item['id']} ({instrument}) after {task.id}; empty if not answered."))
    return columns


# --- reply timing and memory exposure (issue 27 parts 4-5; docs/reply_timing.md) ------------------------
REPLY_TIMING_COLUMNS = [
    _c("model_first_token_ms", NUMBER, "Reply: the model's own latency, milliseconds from asking the provider "
                                       "chain (retries and fallbacks included) to its first token; for a "
                                       "non-streamed reply, to its whole answer. Empty for replies stored before "
                                       "this was recorded."),
    _c("model_total_ms", NUMBER, "Reply: milliseconds from asking the provider chain to its complete answer."),
    _c("pacing_delay_ms", NUMBER, "Reply: milliseconds the reply was held back by the study file's "
                                  "chat.reply_pacing before its first token was shown (0: not held back)."),
    _c("visible_first_token_ms", NUMBER, "Reply: milliseconds from storing the participant's message to the "
                                         "reply's first visible token (a non-streamed reply: the whole reply); "
                                         "minus pacing_delay_ms it is the unpaced latency, context building "
                                         "included."),
    _c("pacing_mode", STRING, "Reply: chat.reply_pacing mode in force (off, floor or match)."),
    _c("exposure_messages", INTEGER, "Reply (not in the study's first task): distinct messages of earlier tasks "
                                     "its memory context quoted by id (recent turns, recalled memories, "
                                     "fragments)."),
    _c("exposure_profile_or_summary", BOOLEAN, "Reply (not in the first task): its context held a profile (L3, "
                                               "L4) or a summary (S1's summary, R1's memory)."),
    _c("exposure_tokens", INTEGER, "Reply (not in the first task): tokens of earlier-task content in its "
                                   "context (one per CJK character, word, number or symbol)."),
]
EXPOSURE_COLUMNS = [
    _c("exposure_replies", INTEGER, "Replies in this attempt with a recorded memory exposure (every reply "
                                    "after the study's first task; 0 in the first task)."),
    _c("exposure_messages_mean", NUMBER, "Mean per reply of exposure_messages (messages.csv): distinct "
                                         "earlier-task messages its memory context quoted by id. 0 for L1."),
    _c("exposure_profile_share", NUMBER, "Share of those replies whose context held a profile or a summary, 0-1."),
    _c("exposure_tokens_mean", NUMBER, "Mean per reply of exposure_tokens: tokens of earlier-task content in the "
                                       "context. 0 for L1."),
]
# --- end of reply timing and memory exposure ---------------------------------------------------------------


def _typing_rule(study: Study) -> str:
    checks = study.typing_checks
    return (f"study file typing_checks: judged when at least {checks.min_chars} characters were typed, not pasted; "
            f"flagged above {checks.max_chars_per_second:g} typed characters per second of typing (too_fast) or "
            f"below {checks.min_keystrokes_per_char:g} key presses per typed character (too_few_keystrokes); "
            "never flagged merely for coming without key presses: not judged when input_kind is dictated or unknown "
            "or no key press was reported (unless composed), and composed text is judged by speed only")


def typing_columns(study: Study) -> list[Column]:
    """messages.csv: how plausibly a person typed each user message, by the study's thresholds."""
    return [
        _c("typed_chars_per_second", NUMBER, "User message: typed characters (text_chars - pasted_chars) per "
                                             "second of typing_ms; empty without typing_ms or when it is 0."),
        _c("keystrokes_per_typed_char", NUMBER, "User message: keystrokes per typed character (text_chars - "
                                                "pasted_chars); empty without keystrokes or typed characters."),
        _c("implausible_typing", BOOLEAN, "User message: 1 when its typing is implausible for a person at a keyboard "
                                          f"(scripted input, or text written elsewhere): {_typing_rule(study)}. "
                                          "0 when judged plausible; empty when not judged (no signals reported, "
                                          "too few typed characters, or a reply). A flag for review, not proof."),
        _c("implausible_typing_reasons", STRING, "User message: why implausible_typing is 1, separated by ';': "
                                                 "too_fast, too_few_keystrokes."),
        _c("content_flags", STRING, "User message, separated by ';': too_little_content (fewer than study file "
                                    f"timing.min_message_words {study.timing.min_message_words} words or "
                                    f"min_message_cjk_chars {study.timing.min_message_cjk_chars} CJK characters, "
                                    "zero-width characters not counted) or near_duplicate (repeats an earlier "
                                    "message of the task): not counted towards min_participant_messages; "
                                    "pasted_chars_clamped (more pasted characters reported than the message holds: "
                                    "pasted_chars is the message's length). Empty: counted, nothing corrected."),
    ]


def exported_columns(file: str, study: Study, *, exclude_pii: bool) -> list[Column]:
    return [c for c in columns_for(file, study) if not (exclude_pii and c.pii)]


def codebook_rows(files: dict[str, list[str]], study: Study, *, exclude_pii: bool,
                  include_reply_contexts: bool) -> list[dict[str, Any]]:
    """One row per (file, column) actually exported, plus one per questionnaire item of the long file."""
    rows: list[dict[str, Any]] = []
    for file, names in files.items():
        documented = {c.name: c for c in columns_for(file, study)}
        for name in names:
            rows.append(_row(file, documented[name]))
        if file == "questionnaires_long.csv":
            for item_id, (instrument, item) in study_items(study).items():
                if exclude_pii and item.get("type") == "text":
                    continue
                column = "text_answer" if item.get("type") == "text" else "value"
                rows.append(_row(file, _item_column(column, instrument, item,
                                                    f"{column} where item_id = {item_id} ({instrument}).")))
    if include_reply_contexts:
        rows += [_row("reply_contexts.jsonl", c) for c in REPLY_CONTEXT_KEYS]
    return rows


def _row(file: str, column: Column) -> dict[str, Any]:
    return {"file": file, "column": column.name, "type": column.type, "description": column.description,
            "pii": int(column.pii), "instrument": column.instrument, "item_id": column.item_id,
            "scale": column.scale, "wording_zh": column.wording_zh, "wording_en": column.wording_en}


def _formula_note(escape_formulas: bool) -> str:
    if not escape_formulas:
        return ("- Spreadsheet formulas were NOT escaped in this export (escape_formulas=0): a cell starting with "
                "`=`, `+`, `-` or `@` may run as a formula if the file is opened in Excel or LibreOffice.")
    return ("- Text cells that start with `=`, `+`, `-`, `@`, a tab or a carriage return begin with an added "
            "apostrophe `'`, so a spreadsheet shows them as text instead of running them as formulas (OWASP "
            "advice on CSV injection); numbers such as `-2` are left alone. Remove the first character of such "
            "a cell to get the participant's exact text (pandas: `s.str.replace(r\"^'(?=[=+\\-@\\t\\r])\", "
            "\"\", regex=True)`), or export again with formula escaping off (`?escape_formulas=0`, "
            "`--no-escape-formulas`).")


def _clock_note(deployment: dict[str, Any] | None) -> str:
    """The clocks the data were recorded with: real seconds per study second, from the pilot settings."""
    deployment = deployment or {}
    scale = deployment.get("timer_scale", 1.0)
    if not deployment.get("pilot_mode"):
        return (f"- Clocks: real time (no pilot mode); timer_scale={scale:g}, so study seconds equal real seconds "
                "(task_sessions.csv active_study_seconds = active_real_seconds).")
    timer = deployment.get("pilot_timer_scale")
    return (f"- Clocks: pilot mode, PILOT_DAY_SECONDS={deployment.get('pilot_day_seconds'):g} (1 study day = that many "
            f"real seconds), PILOT_TIMER_SCALE={'not set' if timer is None else f'{timer:g}'}; task timers ran at "
            f"timer_scale={scale:g} real seconds per study second. Study-second columns (active_seconds, "
            "active_study_seconds) are the timer's; real-second columns (active_real_seconds, chat_wall_seconds, "
            "idle_seconds) are the wall clock.")


def codebook_markdown(rows: list[dict[str, Any]], study: Study, *, generated_at: str,
                      exclude_pii: bool, bom: bool, escape_formulas: bool = True,
                      deployment: dict[str, Any] | None = None) -> str:
    """The same codebook for people: notes, one table per file, then the questionnaire items."""
    out = [
        f"# Codebook: {study.name} data export",
        "",
        f"Generated {generated_at} (UTC). Options: exclude_pii={'yes' if exclude_pii else 'no'}, "
        f"BOM={'yes' if bom else 'no'}.",
        "",
        "- Participants appear only under their pseudonymous `participant_code`; every file carries it and "
        "`memory_group`.",
        "- All times are UTC, formatted `YYYY-MM-DD HH:MM:SS`. Empty cell = missing / not applicable.",
        f"- Numbers: integers as they are; other numbers fixed-point with at most {NUMBER_DECIMALS} decimal places "
        "(rounded to the nearest, trailing zeros dropped, never in exponent notation), so `0.10800000000000001` is "
        "written `0.108` and a value below 0.0000005 is `0`. JSON files keep full precision.",
        "- CSV files are UTF-8 (with a byte-order mark when exported for Excel), comma-separated, with a header.",
        "- `study_config.json` is the exact study definition in use (conditions, tasks, timings, prompts, "
        "questionnaires); `manifest.json` lists the files, their row counts, the export options and `preflight`: "
        "the latest pre-flight report (study-definition hash, providers and models, time, each check's figures and "
        "verdict) and its state for this study definition (verified, failed, changed, not_verified).",
        _clock_note(deployment),
        "- Replies from the `offline` provider come from a template responder, not a language model; its token "
        "counts are characters.",
        _formula_note(escape_formulas),
        "- NUL characters are left out of CSV cells; an unpaired UTF-16 surrogate stored before input was "
        "checked is shown as U+FFFD. JSON files (`reply_contexts.jsonl`, `study_config.json`) keep the raw text.",
    ]
    if exclude_pii:
        out.append("- Exported without personal data: usernames and free-text columns (message text, open "
                   "answers, reasons, profile text) are left out, and reply_contexts.jsonl is not included.")
    out += ["", "## Memory conditions", "", "| id | name | enabled |", "| --- | --- | --- |"]
    for cid, condition in study.conditions.items():
        out.append(f"| {cid} | {condition.name} | {'yes' if cid in study.enabled_conditions else 'no'} |")
    by_file: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        if not (row["file"] == "questionnaires_long.csv" and row["item_id"]):
            by_file.setdefault(row["file"], []).append(row)
    for file, file_rows in by_file.items():
        out += ["", f"## {file}", "", "| column | type | description |", "| --- | --- | --- |"]
        for row in file_rows:
            flag = " *(personal data)*" if row["pii"] else ""
            out.append(f"| `{row['column']}` | {row['type']} | {_md(row['description'])}{flag} |")
    out += ["", "## Questionnaire items", ""]
    asked: dict[str, list[str]] = {}
    for task in study.tasks:
        for _, item in task_items(study, task):
            asked.setdefault(item["id"], []).append(task.id)
    for name, instrument in study.instruments.items():
        title = instrument.title
        heading = instrument.heading
        shown = (f"Participants saw the heading: {_localised(heading, 'en')} / {_localised(heading, 'zh')}"
                 if heading else "Participants saw no heading.")
        out += [f"### {name}: {_localised(title, 'en')} / {_localised(title, 'zh')}", "", shown, "",
                "| item | scale | asked after | wording (zh) | wording (en) |", "| --- | --- | --- | --- | --- |"]
        for item in instrument.items:
            out.append(f"| `{item['id']}` | {_md(item_scale(item))} | {', '.join(asked.get(item['id'], [])) or '-'} "
                       f"| {_md(_localised(item.get('text'), 'zh'))} | {_md(_localised(item.get('text'), 'en'))} |")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def _md(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")
