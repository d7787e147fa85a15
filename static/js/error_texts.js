// What an API error says to the reader, in their language, by the error's code (issue 20, item 5).
// The server's own "message" is English prose for logs and developers; a page shows these texts
// instead, so no English sentence ends up inside a Chinese one. tests/routes/test_error_texts.py
// checks that every code the server can send has a text here in both languages.

import { language } from "./i18n.js";

const ERROR_TEXTS = {
  zh: {
    already_answered: "这条消息已经有回复了。",
    already_erased: "这个账号的数据已被删除。",
    already_withdrawn: "你已经退出了本研究。",
    assignment_busy: "系统正忙，请稍后再试。",
    bad_input: "提交的内容有误，请检查后再试。",
    bad_request: "提交的内容有误，请检查后再试。",
    confirmation_required: "请先确认这一操作。",
    conflict: "现在无法进行这一操作，请刷新页面。",
    consent_required: "需要先同意知情同意书，才能继续。",
    contacts_disabled: "本研究不收集联系方式。",
    csrf_failed: "页面已过期，请刷新后再试。",
    database_busy: "服务器正忙，请稍后再试。",
    empty_message: "消息不能为空。",
    forbidden: "你没有权限进行这一操作。",
    internal_error: "服务器出错了（已记录）。请稍后再试。",
    invalid_answers: "有些题目的回答需要修改。",
    invalid_contact: "请输入有效的电子邮箱地址。",
    invalid_credentials: "用户名或密码不正确。",
    invalid_credentials_format: "请输入用户名和密码。",
    invalid_filter: "筛选条件无效。",
    invalid_flag: "这个标记无效。",
    invalid_json: "请求格式有误，请刷新页面后再试。",
    invalid_language: "不支持这种语言。",
    invalid_limit: "数量无效。",
    invalid_panel_id: "这个链接中的参与者编号无效。",
    invalid_password: "密码至少需要 8 个字符。",
    invalid_quality_signal: "请求中的输入统计无效，请刷新页面后再试。",
    invalid_return_link: "这个返回链接无效或已过期。",
    invalid_text: "文字中有无法保存的字符，请删除后再试。",
    invalid_user_id: "参与者编号无效。",
    invalid_username: "用户名需要 3–32 个字符：字母、数字、点、连字符或下划线。",
    login_required: "请先登录。",
    message_too_long: "消息太长了（最多 {limit} 个字符）。",
    method_not_allowed: "不支持这种请求。",
    no_upcoming_task: "目前没有待开始的任务。",
    not_found: "找不到要访问的内容。",
    panel_id_taken: "这个参与者编号已经注册过了。",
    participant_erased: "这个账号已被删除，无法继续。",
    study_not_open: "本研究尚未开放，请稍后再来。",
    idempotency_key_reused: "这条消息的编号已用于另一条内容，请刷新页面后重新发送。",
    invalid_idempotency_key: "消息编号无效，请刷新页面后重新发送。",
    invalid_session_params: "链接中的参数无效，请从研究平台重新打开链接。",
    invalid_time_zone: "无法识别你的时区。",
    panel_id_case_conflict: "这个参与者编号与已有编号只在大小写上不同，无法使用；请联系研究团队。",
    panel_id_not_expected: "这个参与者编号不在本研究的名单上；请确认你打开的是研究平台给你的链接。",
    panel_reentry_refused: "这个编号已经开始参加研究。为保护你的数据，请用提醒或研究平台消息中的个人链接返回，或联系研究团队。",
    reserved_username: "这个用户名不能使用，请换一个。",
    study_full: "本研究的名额已满，感谢你的关注。",
    // issue 28 (integrity helper)
    password_registration_closed: "本研究只能通过招募平台的链接参加，不能用用户名和密码注册。",
    panel_id_closed: "这个参与者编号不能再参加本研究。",
    username_unavailable: "这个用户名不能使用，请换一个。",
    panel_allowlist_unavailable: "暂时无法核对本研究的参与者名单，因此新参与者现在无法进入；研究团队已收到通知，请稍后再试。",
    consent_text_unknown: "找不到你当时同意的知情同意书文本，请联系研究团队。",
    debrief_not_yet: "研究说明会在你完成全部任务或退出研究后显示。",
    erasure_not_offered: "本研究的知情同意书不提供退出时删除数据，你的数据将被保留；如有疑问请联系研究团队。",
    gone: "这项内容已不存在。",
    invalid_erase: "请选择是否同时删除你的数据。",
    participant_busy: "你的账号正在处理另一项操作，请稍后再试。",
    participant_withdrawn: "你已退出本研究，无法继续。",
    password_too_long: "密码太长了（最多 256 个字符）。",
    provider_unavailable: "AI 暂时无法回复。你的消息已保存，请稍后重试。",
    questionnaire_already_submitted: "这份问卷已经提交过了。",
    reason_required: "请填写原因。",
    reason_too_long: "原因太长了。",
    reply_not_saved: "回复没能保存，请重试。",
    task_already_started: "这个任务刚刚在别处开始了，请刷新页面。",
    task_available: "这个任务还没有开始。",
    task_done: "这个任务已经完成了。",
    task_in_progress: "这个任务正在进行中。",
    task_locked: "这个任务还没有解锁。",
    task_not_started: "这个任务还没有开始。",
    task_phase_chat: "请先完成对话部分。",
    task_phase_closed: "这个任务已经结束了。",
    task_phase_questionnaire: "对话已结束，请填写问卷。",
    time_up: "这次对话的时间已到。",
    too_early: "还没有达到最短对话时间。",
    too_large: "提交的内容太大了。",
    too_many_requests: "操作太频繁，请稍等片刻再试。",
    unauthorised: "请先登录。",
    unavailable: "服务暂时不可用，请稍后再试。",
    unknown_instrument: "找不到这份问卷。",
    unknown_message: "找不到这条消息。",
    unknown_participant: "找不到这位参与者。",
    unknown_plot: "找不到这张图表。",
    unknown_task: "找不到这个任务。",
    user_id_required: "需要参与者编号。",
    username_taken: "这个用户名已被使用，请换一个。",
    weak_password: "这个密码太容易被猜到了，请换一个不常见的密码。",
    withdrawn: "你已退出本研究，无法继续。",
    unknown_code: "出错了，请稍后再试。（错误代码：{code}）",
  },
  en: {
    already_answered: "This message already has a reply.",
    already_erased: "This account's data has already been erased.",
    already_withdrawn: "You have already withdrawn from the study.",
    assignment_busy: "The system is busy; please try again in a moment.",
    bad_input: "Something in what was sent is not valid; please check it and try again.",
    bad_request: "Something in what was sent is not valid; please check it and try again.",
    confirmation_required: "Please confirm this action first.",
    conflict: "This cannot be done right now; please reload the page.",
    consent_required: "You need to agree to the consent form to continue.",
    contacts_disabled: "This study does not collect contact details.",
    csrf_failed: "The page has expired; please reload it and try again.",
    database_busy: "The server is busy; please try again shortly.",
    empty_message: "The message is empty.",
    forbidden: "You are not allowed to do this.",
    internal_error: "Something went wrong on the server (it has been logged). Please try again later.",
    invalid_answers: "Some answers need attention.",
    invalid_contact: "Please enter a valid email address.",
    invalid_credentials: "The username or password is not correct.",
    invalid_credentials_format: "Please enter a username and a password.",
    invalid_filter: "That filter is not valid.",
    invalid_flag: "That flag is not valid.",
    invalid_json: "The request was malformed; please reload the page and try again.",
    invalid_language: "That language is not supported.",
    invalid_limit: "That number is not valid.",
    invalid_panel_id: "The participant ID in this link is not valid.",
    invalid_password: "The password needs at least 8 characters.",
    invalid_quality_signal: "The typing statistics sent were not valid; please reload the page and try again.",
    invalid_return_link: "This return link is not valid or has expired.",
    invalid_text: "The text contains a character that cannot be stored; please remove it and try again.",
    invalid_user_id: "That participant number is not valid.",
    invalid_username: "Usernames have 3–32 characters: letters, digits, dots, hyphens or underscores.",
    login_required: "Please log in first.",
    message_too_long: "The message is too long (at most {limit} characters).",
    method_not_allowed: "This request is not supported.",
    no_upcoming_task: "There is no task waiting to start.",
    not_found: "What you asked for was not found.",
    panel_id_taken: "This participant ID is already registered.",
    participant_erased: "This account has been erased and cannot continue.",
    study_not_open: "The study is not open yet; please come back later.",
    idempotency_key_reused: "This message id was already used for other text; please reload the page and send it again.",
    invalid_idempotency_key: "The message id is not valid; please reload the page and send it again.",
    invalid_session_params: "The link carries invalid parameters; please open it again from the panel.",
    invalid_time_zone: "Your time zone could not be recognised.",
    panel_id_case_conflict: "This participant id differs from an existing one only in upper/lower case and cannot be used; please contact the research team.",
    panel_id_not_expected: "This participant id is not on the study list; please check that you opened the link the panel gave you.",
    panel_reentry_refused: "This id has already started the study. To protect your data, please come back through the personal link in your reminder or panel message, or contact the research team.",
    reserved_username: "This username cannot be used; please choose another.",
    study_full: "This study is full. Thank you for your interest.",
    // issue 28 (integrity helper)
    password_registration_closed: "This study is entered through your recruitment panel's link only; registering with a username and password is closed.",
    panel_id_closed: "This participant id can no longer take part in this study.",
    username_unavailable: "This username cannot be used; please choose another.",
    panel_allowlist_unavailable: "The study's list of expected participants cannot be checked right now, so nobody new can enter; the research team has been told. Please try again later.",
    consent_text_unknown: "The consent text you agreed to cannot be found; please contact the research team.",
    debrief_not_yet: "The debrief is shown once you have finished every task or withdrawn from the study.",
    erasure_not_offered: "This study's consent does not offer erasure on withdrawal, so your data are kept; please contact the research team with questions.",
    gone: "This no longer exists.",
    invalid_erase: "Please say whether your data should be erased as well.",
    participant_busy: "Your account is busy with another action; please try again in a moment.",
    participant_withdrawn: "You have withdrawn from the study and cannot continue.",
    password_too_long: "The password is too long (at most 256 characters).",
    provider_unavailable: "The AI cannot answer right now. Your message is saved; please try again shortly.",
    questionnaire_already_submitted: "This questionnaire has already been submitted.",
    reason_required: "Please give a reason.",
    reason_too_long: "The reason is too long.",
    reply_not_saved: "The reply could not be saved; please try again.",
    task_already_started: "This task was just started elsewhere; please reload the page.",
    task_available: "This task has not been started yet.",
    task_done: "This task is already done.",
    task_in_progress: "This task is in progress.",
    task_locked: "This task is not unlocked yet.",
    task_not_started: "This task has not been started yet.",
    task_phase_chat: "Please finish the chat first.",
    task_phase_closed: "This task has ended.",
    task_phase_questionnaire: "The chat has ended; please answer the questionnaire.",
    time_up: "The time for this chat is up.",
    too_early: "The minimum chat time has not been reached yet.",
    too_large: "What was sent is too large.",
    too_many_requests: "Too many requests; please wait a moment and try again.",
    unauthorised: "Please log in first.",
    unavailable: "The service is unavailable for a moment; please try again shortly.",
    unknown_instrument: "This questionnaire was not found.",
    unknown_message: "This message was not found.",
    unknown_participant: "This participant was not found.",
    unknown_plot: "This chart was not found.",
    unknown_task: "This task was not found.",
    user_id_required: "A participant number is needed.",
    username_taken: "This username is taken; please choose another.",
    weak_password: "This password is too easy to guess; please choose a less common one.",
    withdrawn: "You have withdrawn from the study and cannot continue.",
    unknown_code: "Something went wrong; please try again later. (Error code: {code})",
  },
};

// zxcvbn's password feedback (its English sentences, as the server passes them on) in Chinese.
// English pages show zxcvbn's own sentence.
const PASSWORD_FEEDBACK_ZH = {
  "Use a few words, avoid common phrases.": "可以用几个词组成密码，避免常见短语。",
  "No need for symbols, digits, or uppercase letters.": "不一定需要符号、数字或大写字母。",
  "Add another word or two. Uncommon words are better.": "再加一两个词，越不常见越好。",
  "Straight rows of keys are easy to guess.": "键盘上连成一排的按键很容易被猜到。",
  "Short keyboard patterns are easy to guess.": "短的键盘图案很容易被猜到。",
  "Use a longer keyboard pattern with more turns.": "键盘图案要更长，转折更多。",
  'Repeats like "aaa" are easy to guess.': "像“aaa”这样的重复很容易被猜到。",
  'Repeats like "abcabcabc" are only slightly harder to guess than "abc".': "像“abcabcabc”这样的重复只比“abc”稍难猜一点。",
  "Avoid repeated words and characters.": "避免重复的词和字符。",
  'Sequences like "abc" or "6543" are easy to guess.': "像“abc”或“6543”这样的序列很容易被猜到。",
  "Avoid sequences.": "避免使用序列。",
  "Recent years are easy to guess.": "最近的年份很容易被猜到。",
  "Avoid recent years.": "避免使用最近的年份。",
  "Avoid years that are associated with you.": "避免使用与你有关的年份。",
  "Dates are often easy to guess.": "日期往往很容易被猜到。",
  "Avoid dates and years that are associated with you.": "避免使用与你有关的日期和年份。",
  "This is a top-10 common password.": "这是最常见的 10 个密码之一。",
  "This is a top-100 common password.": "这是最常见的 100 个密码之一。",
  "This is a very common password.": "这是一个非常常见的密码。",
  "This is similar to a commonly used password.": "这和一个常用密码很相似。",
  "A word by itself is easy to guess.": "单独一个词很容易被猜到。",
  "Names and surnames by themselves are easy to guess.": "单独的名字或姓氏很容易被猜到。",
  "Common names and surnames are easy to guess.": "常见的名字和姓氏很容易被猜到。",
  "Capitalization doesn't help very much.": "大写字母帮助不大。",
  "All-uppercase is almost as easy to guess as all-lowercase.": "全部大写几乎和全部小写一样容易被猜到。",
  "Reversed words aren't much harder to guess.": "把词倒过来写并不会难猜多少。",
  "Predictable substitutions like '@' instead of 'a' don't help very much.": "用“@”代替“a”这类可预测的替换帮助不大。",
};

function fill(text, vars) {
  return text.replace(/\{(\w+)\}/g, (match, name) => (name in vars ? String(vars[name]) : match));
}

/** One of zxcvbn's feedback sentences in the reader's language ("" for none). */
export function passwordFeedbackText(sentence) {
  if (!sentence) return "";
  if (language() !== "zh") return sentence;
  return PASSWORD_FEEDBACK_ZH[sentence] || "";
}

/** The text for an ApiError (or anything with a code and details) in the reader's language. */
export function apiErrorText(err) {
  const texts = ERROR_TEXTS[language()] || ERROR_TEXTS.zh;
  const details = err.details || {};
  const text = texts[err.code];
  if (!text) return fill(texts.unknown_code, { code: err.code || err.status || "?" });
  if (err.code !== "weak_password") return fill(text, details);
  const feedback = [details.warning, ...(details.suggestions || [])].map(passwordFeedbackText).filter(Boolean);
  return [text, ...feedback].join(language() === "zh" ? "" : " ");
}

// What the server says is wrong with one questionnaire answer (details.items), in the reader's language.
const ITEM_PROBLEMS = [
  [/^required$/, { zh: "这道题需要回答。", en: "This question needs an answer." }],
  [/^must be a whole number$/, { zh: "请选择一个刻度上的数字。", en: "Please choose a number on the scale." }],
  [/^must be between (-?\d+) and (-?\d+)$/, { zh: "请选择 $1 到 $2 之间的数字。", en: "Please choose a number from $1 to $2." }],
  [/^must be one of the options$/, { zh: "请选择一个选项。", en: "Please choose one of the options." }],
  [/^must be text$/, { zh: "请填写文字。", en: "Please write your answer as text." }],
  [/^too long$/, { zh: "回答太长了。", en: "This answer is too long." }],
  [/^unknown item$/, { zh: "这道题不属于这份问卷。", en: "This question is not part of the questionnaire." }],
];

/** One item's problem from the server (e.g. "must be between 1 and 7") in the reader's language. */
export function itemProblemText(reason) {
  const lang = language() === "en" ? "en" : "zh";
  for (const [pattern, texts] of ITEM_PROBLEMS) {
    if (pattern.test(reason)) return String(reason).replace(pattern, texts[lang]);
  }
  return ERROR_TEXTS[lang].invalid_answers;
}
