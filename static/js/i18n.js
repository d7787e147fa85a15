// Interface text in Chinese (the default) and English. Study content (consent, task texts,
// questionnaire items) comes from the server in the participant's language; this file only
// holds the page's own words. The choice is kept in localStorage and, once logged in, on the
// server (POST /api/auth/language) so that server-side texts follow it.

const STORAGE_KEY = "memorylab.language";
const SUPPORTED = ["zh", "en"];

const MESSAGES = {
  zh: {
    "app.title": "AI 对话研究",
    "app.skip": "跳到主要内容",
    "app.loading": "正在加载…",
    "app.switch_language": "English",
    "app.switch_language_label": "Switch to English",
    "app.logout": "退出登录",
    "app.logged_in_as": "已登录：{name}",
    "app.noscript": "本页面需要启用 JavaScript。",
    "error.network": "无法连接服务器，请检查网络后重试。",
    "error.generic": "出错了：{message}",
    "error.rate": "操作太频繁，请稍等片刻再试。",

    "consent.title": "知情同意",
    "consent.agree": "我已阅读并理解以上内容，自愿参加本研究。",
    "consent.continue": "同意并注册",
    "consent.have_account": "已经注册过？",
    "consent.login": "直接登录",
    "consent.must_agree": "请先勾选同意，才能继续注册。",

    "register.title": "注册账号",
    "register.username": "用户名",
    "register.username_hint": "3–32 个字符：字母、数字、点、连字符或下划线；请不要使用真实姓名。",
    "register.password": "密码",
    "register.password_hint": "至少 8 个字符。",
    "register.password_repeat": "再次输入密码",
    "register.password_mismatch": "两次输入的密码不一致。",
    "register.submit": "注册并开始",
    "register.back": "返回知情同意书",
    "register.taken": "这个用户名已被使用，请换一个。",

    "login.title": "登录",
    "login.submit": "登录",
    "login.failed": "用户名或密码不正确。",
    "login.new": "还没有账号？",
    "login.register": "阅读知情同意书并注册",

    "tasks.title": "我的任务",
    "tasks.intro": "研究共有四次对话任务，需要按顺序完成，每个任务只能做一次。",
    "tasks.status.locked": "未解锁",
    "tasks.status.available": "可以开始",
    "tasks.status.in_progress": "进行中",
    "tasks.status.done": "已完成",
    "tasks.unlocks_at": "解锁时间：{time}",
    "tasks.unlocks_after_previous": "完成前一个任务后，将在这里显示解锁时间。",
    "tasks.available_since": "已于 {time} 开放",
    "tasks.done_at": "完成于 {time}",
    "tasks.start": "开始任务",
    "tasks.continue": "继续任务",
    "tasks.questionnaire": "填写问卷",
    "tasks.all_done": "你已完成全部任务，非常感谢你的参与！",
    "tasks.next_unlock": "下一个任务将于 {time} 解锁。",
    "tasks.withdrawn": "你已退出本研究，感谢你此前的参与。",
    "tasks.thanks": "问卷已提交，谢谢！",

    "task.back": "← 返回任务列表",
    "task.instructions": "任务说明",
    "task.remaining": "剩余时间",
    "task.remaining_label": "本任务剩余时间 {time}",
    "task.min_hint": "至少对话 {minutes} 分钟后可以结束。",
    "task.min_hint_seconds": "至少对话 {seconds} 秒后可以结束。",
    "task.finish": "结束对话，填写问卷",
    "task.finish_confirm": "确定结束对话吗？结束后不能再继续这次对话。",
    "task.cancel": "取消",
    "task.too_early": "还没到最短对话时间，请再聊一会儿。",
    "task.time_up": "本任务的对话时间已到，请填写问卷。",
    "task.chat_label": "对话记录",
    "task.empty_chat": "对话还没有开始。先打个招呼吧！",
    "task.input_label": "你的消息",
    "task.input_placeholder": "在这里输入…（Enter 发送，Shift+Enter 换行）",
    "task.send": "发送",
    "task.sending": "发送中…",
    "task.you": "你",
    "task.assistant": "助手",
    "task.thinking": "助手正在输入…",
    "task.reply_failed": "助手暂时无法回复。你的消息已保存。",
    "task.retry": "重试",
    "task.empty_message": "请输入内容后再发送。",
    "task.db_busy_retrying": "服务器暂时繁忙，消息还没有保存。文字仍在输入框里，正在自动重试（第 {attempt} 次）……",
    "task.db_busy_gave_up": "服务器暂时繁忙，消息还没有保存。文字仍在输入框里，请稍后再点“发送”。",
    "task.too_long": "消息太长了（最多 {limit} 个字符）。",
    "task.chars": "{count} / {limit}",
    "task.not_available": "这个任务现在还不能开始。",
    "task.done": "这个任务已经完成。",

    "q.title": "问卷：{task}",
    "q.intro": "请根据刚才的对话回答以下问题。带 * 的为必答题。",
    "q.submit": "提交问卷",
    "q.required": "这道题需要回答。",
    "q.invalid": "这个回答无效：{reason}",
    "q.fix_errors": "有 {count} 道题需要修改，请查看标红的题目。",
    "q.likert_low": "完全不同意",
    "q.likert_high": "完全同意",
    "q.ios_self": "我",
    "q.ios_other": "助手",
    "q.ios_option": "第 {n} 组：{desc}",
    "q.ios_desc_1": "两个圆完全分开",
    "q.ios_desc_7": "两个圆几乎重合",
    "q.ios_desc_mid": "两个圆重叠程度 {n}/7",
    "q.text_placeholder": "请在这里作答（可选）",

    "admin.title": "研究管理台",
    "admin.nav.monitor": "进度监控",
    "admin.nav.failures": "模型调用失败",
    "admin.nav.plots": "图表",
    "admin.nav.export": "导出数据",
    "admin.updated": "更新于 {time}",
    "admin.refresh_failed": "刷新失败：{message}",
    "admin.groups": "各组人数",
    "admin.funnel": "完成漏斗",
    "admin.funnel.registered": "已注册",
    "admin.filters": "筛选",
    "admin.filter.group": "组别",
    "admin.filter.status": "状态",
    "admin.filter.overdue": "只看逾期",
    "admin.filter.all": "全部",
    "admin.filter.search": "搜索编号或用户名",
    "admin.participants": "参与者（{shown} / {total}）",
    "admin.col.code": "编号",
    "admin.col.username": "用户名",
    "admin.col.group": "组别",
    "admin.col.status": "状态",
    "admin.col.enrolled": "入组时间",
    "admin.col.last_active": "最近活动",
    "admin.col.messages": "消息数",
    "admin.col.questionnaires": "已交问卷",
    "admin.col.consolidation": "记忆整合",
    "admin.col.failures": "调用失败",
    "admin.sort_by": "按{column}排序",
    "admin.no_participants": "还没有参与者。",
    "admin.no_match": "没有符合筛选条件的参与者。",
    "admin.task.active": "已进行 {time}",
    "admin.task.phase_questionnaire": "填写问卷中",
    "admin.task.since": "自 {time} 开放",
    "admin.task.overdue": "逾期",
    "admin.pending": "待整合 {n}",
    "admin.back": "← 返回监控",
    "admin.detail.title": "参与者 {code}",
    "admin.detail.summary": "概况",
    "admin.detail.conversation": "对话（按任务）",
    "admin.detail.no_messages": "这个任务没有消息。",
    "admin.detail.sessions": "任务记录",
    "admin.detail.profiles": "用户画像版本",
    "admin.detail.no_profiles": "还没有画像。",
    "admin.detail.recalls": "回忆事件",
    "admin.detail.no_recalls": "还没有回忆事件。",
    "admin.detail.questionnaires": "问卷回答",
    "admin.detail.no_answers": "还没有问卷回答。",
    "admin.detail.runs": "整合记录",
    "admin.detail.no_runs": "还没有整合记录。",
    "admin.detail.failures": "模型调用失败",
    "admin.detail.no_failures": "没有失败记录。",
    "admin.detail.forgetting": "遗忘曲线",
    "admin.detail.actions": "操作",
    "admin.context.summary": "记忆上下文 · {provider} / {model}",
    "admin.context.group": "组别",
    "admin.context.profile": "画像",
    "admin.context.profile_version": "画像（版本 {version}）",
    "admin.context.recent_turns": "最近对话",
    "admin.context.recalled": "回忆的记忆",
    "admin.context.summary_block": "结构化摘要",
    "admin.context.fragments": "历史片段",
    "admin.context.r1_memory": "递归记忆",
    "admin.context.notes": "备注",
    "admin.context.prompt": "完整提示词（{n} 条消息）",
    "admin.context.none": "（无）",
    "admin.context.meta": "提供方 {provider} · 模型 {model} · 输入 {pt} / 输出 {ct} tokens · {latency} ms",
    "admin.context.params": "参数",
    "admin.context.attempts": "调用尝试",
    "admin.context.missing": "这条回复没有保存记忆上下文。",
    "admin.action.consolidate": "立即整合记忆",
    "admin.action.consolidate_all": "整合所有待处理",
    "admin.action.withdraw": "标记退出研究",
    "admin.action.withdraw_reason": "退出原因",
    "admin.action.reset": "重置任务",
    "admin.action.reset_task": "要重置的任务",
    "admin.action.reset_reason": "重置原因（会记入审计日志）",
    "admin.action.reason_required": "请填写原因。",
    "admin.action.confirm_withdraw": "确定将该参与者标记为退出吗？数据会保留。",
    "admin.action.confirm_reset": "确定重置任务 {task} 吗？",
    "admin.action.done": "已完成：{what}",
    "admin.action.unavailable": "此操作暂不可用（{message}）",
    "admin.failures.title": "模型调用失败记录",
    "admin.failures.none": "没有失败记录。",
    "admin.failures.by_provider": "按提供方汇总",
    "admin.failures.list": "全部失败记录（最新在前）",
    "admin.plots.title": "图表",
    "admin.plots.funnel": "完成漏斗",
    "admin.plots.group_sizes": "各组人数随时间变化",
    "admin.plots.questionnaire_means": "各组各任务问卷均值（95% 置信区间）",
    "admin.plots.recall_events": "L4 各任务的回忆事件",
    "admin.plots.forgetting_curves": "遗忘曲线",
    "admin.plots.unavailable": "这张图暂时无法生成。",
    "admin.plots.reload": "重新生成",
    "admin.export.title": "导出数据",
    "admin.export.intro": "下载一个 zip 文件：参与者、消息、问卷（长/宽格式）、画像、回忆事件、任务记录、编码手册和研究配置。",
    "admin.export.bom": "CSV 带 UTF-8 BOM（方便用 Excel 打开）",
    "admin.export.exclude_pii": "不导出用户名和自由文本",
    "admin.export.download": "下载导出文件",
    "admin.login.title": "管理员登录",
    "admin.login.expired": "登录已过期，请重新登录。",
    "admin.login.not_admin": "这个账号没有管理员权限。",
    "admin.detail.audit": "审计日志",
    "admin.status.active": "参与中",
    "admin.status.withdrawn": "已退出",
    "admin.yes": "是",
    "admin.no": "否",
  },
  en: {
    "app.title": "AI Conversation Study",
    "app.skip": "Skip to main content",
    "app.loading": "Loading…",
    "app.switch_language": "中文",
    "app.switch_language_label": "切换到中文",
    "app.logout": "Log out",
    "app.logged_in_as": "Logged in as {name}",
    "app.noscript": "This page needs JavaScript.",
    "error.network": "Cannot reach the server. Check your connection and try again.",
    "error.generic": "Something went wrong: {message}",
    "error.rate": "Too many requests; please wait a moment and try again.",

    "consent.title": "Informed consent",
    "consent.agree": "I have read and understood the above and agree to take part.",
    "consent.continue": "Agree and register",
    "consent.have_account": "Already registered?",
    "consent.login": "Log in",
    "consent.must_agree": "Please tick the consent box to continue.",

    "register.title": "Create an account",
    "register.username": "Username",
    "register.username_hint": "3–32 letters, digits, dots, hyphens or underscores; please do not use your real name.",
    "register.password": "Password",
    "register.password_hint": "At least 8 characters.",
    "register.password_repeat": "Repeat the password",
    "register.password_mismatch": "The passwords do not match.",
    "register.submit": "Register and start",
    "register.back": "Back to the consent form",
    "register.taken": "This username is taken; please choose another.",

    "login.title": "Log in",
    "login.submit": "Log in",
    "login.failed": "Wrong username or password.",
    "login.new": "No account yet?",
    "login.register": "Read the consent form and register",

    "tasks.title": "My tasks",
    "tasks.intro": "The study has four chat tasks. They are done in order, and each only once.",
    "tasks.status.locked": "Locked",
    "tasks.status.available": "Available",
    "tasks.status.in_progress": "In progress",
    "tasks.status.done": "Done",
    "tasks.unlocks_at": "Unlocks {time}",
    "tasks.unlocks_after_previous": "Its unlock time appears here once the previous task is done.",
    "tasks.available_since": "Open since {time}",
    "tasks.done_at": "Completed {time}",
    "tasks.start": "Start task",
    "tasks.continue": "Continue",
    "tasks.questionnaire": "Fill in the questionnaire",
    "tasks.all_done": "You have completed every task. Thank you for taking part!",
    "tasks.next_unlock": "The next task unlocks {time}.",
    "tasks.withdrawn": "You have withdrawn from the study. Thank you for your participation.",
    "tasks.thanks": "Questionnaire submitted. Thank you!",

    "task.back": "← Back to my tasks",
    "task.instructions": "Instructions",
    "task.remaining": "Time left",
    "task.remaining_label": "Time left in this task: {time}",
    "task.min_hint": "You can finish after at least {minutes} minutes of chat.",
    "task.min_hint_seconds": "You can finish after at least {seconds} seconds of chat.",
    "task.finish": "Finish chat and go to the questionnaire",
    "task.finish_confirm": "Finish the chat? You cannot continue this conversation afterwards.",
    "task.cancel": "Cancel",
    "task.too_early": "The minimum chat time has not passed yet; please chat a little longer.",
    "task.time_up": "Time is up for this chat. Please fill in the questionnaire.",
    "task.chat_label": "Conversation",
    "task.empty_chat": "The conversation has not started yet. Say hello!",
    "task.input_label": "Your message",
    "task.input_placeholder": "Type here… (Enter sends, Shift+Enter for a new line)",
    "task.send": "Send",
    "task.sending": "Sending…",
    "task.you": "You",
    "task.assistant": "Assistant",
    "task.thinking": "The assistant is typing…",
    "task.reply_failed": "The assistant cannot answer right now. Your message is saved.",
    "task.retry": "Retry",
    "task.empty_message": "Please type a message first.",
    "task.db_busy_retrying": "The server is busy and your message is not saved yet. It is still in the box; trying again (attempt {attempt})…",
    "task.db_busy_gave_up": "The server is busy and your message is not saved yet. It is still in the box; please press Send again in a moment.",
    "task.too_long": "The message is too long (at most {limit} characters).",
    "task.chars": "{count} / {limit}",
    "task.not_available": "This task cannot be started yet.",
    "task.done": "This task is done.",

    "q.title": "Questionnaire: {task}",
    "q.intro": "Please answer these questions about the conversation you just had. Items marked * are required.",
    "q.submit": "Submit",
    "q.required": "This question needs an answer.",
    "q.invalid": "This answer is not valid: {reason}",
    "q.fix_errors": "{count} answers need attention; see the items marked in red.",
    "q.likert_low": "Strongly disagree",
    "q.likert_high": "Strongly agree",
    "q.ios_self": "Me",
    "q.ios_other": "AI",
    "q.ios_option": "Pair {n}: {desc}",
    "q.ios_desc_1": "the circles are separate",
    "q.ios_desc_7": "the circles almost coincide",
    "q.ios_desc_mid": "overlap {n} of 7",
    "q.text_placeholder": "Your answer (optional)",

    "admin.title": "Study console",
    "admin.nav.monitor": "Monitor",
    "admin.nav.failures": "Provider failures",
    "admin.nav.plots": "Plots",
    "admin.nav.export": "Export",
    "admin.updated": "updated {time}",
    "admin.refresh_failed": "Refresh failed: {message}",
    "admin.groups": "Participants per group",
    "admin.funnel": "Completion funnel",
    "admin.funnel.registered": "Registered",
    "admin.filters": "Filters",
    "admin.filter.group": "Group",
    "admin.filter.status": "Status",
    "admin.filter.overdue": "Overdue only",
    "admin.filter.all": "All",
    "admin.filter.search": "Search code or username",
    "admin.participants": "Participants ({shown} / {total})",
    "admin.col.code": "Code",
    "admin.col.username": "Username",
    "admin.col.group": "Group",
    "admin.col.status": "Status",
    "admin.col.enrolled": "Enrolled",
    "admin.col.last_active": "Last activity",
    "admin.col.messages": "Messages",
    "admin.col.questionnaires": "Questionnaires",
    "admin.col.consolidation": "Consolidation",
    "admin.col.failures": "Failures",
    "admin.sort_by": "Sort by {column}",
    "admin.no_participants": "No participants yet.",
    "admin.no_match": "No participant matches the filters.",
    "admin.task.active": "active {time}",
    "admin.task.phase_questionnaire": "in questionnaire",
    "admin.task.since": "open since {time}",
    "admin.task.overdue": "overdue",
    "admin.pending": "{n} pending",
    "admin.back": "← Back to the monitor",
    "admin.detail.title": "Participant {code}",
    "admin.detail.summary": "Summary",
    "admin.detail.conversation": "Conversation by task",
    "admin.detail.no_messages": "No messages in this task.",
    "admin.detail.sessions": "Task sessions",
    "admin.detail.profiles": "Profile versions",
    "admin.detail.no_profiles": "No profile yet.",
    "admin.detail.recalls": "Recall events",
    "admin.detail.no_recalls": "No recall events yet.",
    "admin.detail.questionnaires": "Questionnaire answers",
    "admin.detail.no_answers": "No answers yet.",
    "admin.detail.runs": "Consolidation runs",
    "admin.detail.no_runs": "No consolidation runs yet.",
    "admin.detail.failures": "Provider failures",
    "admin.detail.no_failures": "No failures.",
    "admin.detail.forgetting": "Forgetting curves",
    "admin.detail.actions": "Actions",
    "admin.context.summary": "Memory context · {provider} / {model}",
    "admin.context.group": "Group",
    "admin.context.profile": "Profile",
    "admin.context.profile_version": "Profile (version {version})",
    "admin.context.recent_turns": "Recent turns",
    "admin.context.recalled": "Recalled memories",
    "admin.context.summary_block": "Structured summary",
    "admin.context.fragments": "History fragments",
    "admin.context.r1_memory": "Recursive memory",
    "admin.context.notes": "Notes",
    "admin.context.prompt": "Full prompt ({n} messages)",
    "admin.context.none": "(none)",
    "admin.context.meta": "provider {provider} · model {model} · {pt} in / {ct} out tokens · {latency} ms",
    "admin.context.params": "Parameters",
    "admin.context.attempts": "Attempts",
    "admin.context.missing": "No memory context was stored with this reply.",
    "admin.action.consolidate": "Consolidate now",
    "admin.action.consolidate_all": "Consolidate all pending",
    "admin.action.withdraw": "Withdraw participant",
    "admin.action.withdraw_reason": "Reason for withdrawal",
    "admin.action.reset": "Reset task",
    "admin.action.reset_task": "Task to reset",
    "admin.action.reset_reason": "Reason (kept in the audit log)",
    "admin.action.reason_required": "Please give a reason.",
    "admin.action.confirm_withdraw": "Withdraw this participant? Their data are kept.",
    "admin.action.confirm_reset": "Reset task {task}?",
    "admin.action.done": "Done: {what}",
    "admin.action.unavailable": "This action is not available ({message})",
    "admin.failures.title": "Provider failures",
    "admin.failures.none": "No failures recorded.",
    "admin.failures.by_provider": "Per provider",
    "admin.failures.list": "Every failure, newest first",
    "admin.plots.title": "Plots",
    "admin.plots.funnel": "Completion funnel",
    "admin.plots.group_sizes": "Group sizes over time",
    "admin.plots.questionnaire_means": "Questionnaire means by group and task (95% CI)",
    "admin.plots.recall_events": "Recall events per task (L4)",
    "admin.plots.forgetting_curves": "Forgetting curves",
    "admin.plots.unavailable": "This plot is not available right now.",
    "admin.plots.reload": "Redraw",
    "admin.export.title": "Export data",
    "admin.export.intro": "Download a zip: participants, messages, questionnaires (long and wide), profiles, recall events, task sessions, the codebook and the study configuration.",
    "admin.export.bom": "CSV with a UTF-8 BOM (for Excel)",
    "admin.export.exclude_pii": "Leave out usernames and free text",
    "admin.export.download": "Download the export",
    "admin.login.title": "Admin login",
    "admin.login.expired": "Your session has expired; please log in again.",
    "admin.login.not_admin": "This account is not an admin.",
    "admin.detail.audit": "Audit log",
    "admin.status.active": "active",
    "admin.status.withdrawn": "withdrawn",
    "admin.yes": "yes",
    "admin.no": "no",
  },
};

const listeners = new Set();

function initialLanguage() {
  const stored = localStorage.getItem(STORAGE_KEY);
  return SUPPORTED.includes(stored) ? stored : "zh";
}

let current = initialLanguage();

export function language() {
  return current;
}

export function otherLanguage() {
  return current === "zh" ? "en" : "zh";
}

/** The text for key in the current language, with {name} placeholders filled from vars. */
export function t(key, vars = {}) {
  const text = MESSAGES[current][key] ?? MESSAGES.zh[key] ?? key;
  return text.replace(/\{(\w+)\}/g, (match, name) => (name in vars ? String(vars[name]) : match));
}

/** Change the language locally; listeners re-render. Returns true when it changed. */
export function setLanguage(lang) {
  if (!SUPPORTED.includes(lang) || lang === current) return false;
  current = lang;
  localStorage.setItem(STORAGE_KEY, lang);
  applyDocumentLanguage();
  listeners.forEach((fn) => fn(lang));
  return true;
}

export function onLanguageChange(fn) {
  listeners.add(fn);
}

export function applyDocumentLanguage() {
  document.documentElement.lang = current === "zh" ? "zh-CN" : "en";
  document.querySelectorAll("[data-i18n]").forEach((el) => {
    el.textContent = t(el.dataset.i18n);
  });
}

/** A server timestamp (naive UTC with a Z) shown in the reader's local time. */
export function formatDateTime(iso, { seconds = false } = {}) {
  if (!iso) return "";
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return iso;
  return new Intl.DateTimeFormat(current === "zh" ? "zh-CN" : "en-GB", {
    year: "numeric", month: "2-digit", day: "2-digit",
    hour: "2-digit", minute: "2-digit", ...(seconds ? { second: "2-digit" } : {}),
    hour12: false,
  }).format(date);
}

/** A compact local time (month-day hour:minute) for dense tables. */
export function formatShort(iso) {
  if (!iso) return "";
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return iso;
  return new Intl.DateTimeFormat(current === "zh" ? "zh-CN" : "en-GB", {
    month: "2-digit", day: "2-digit", hour: "2-digit", minute: "2-digit", hour12: false,
  }).format(date);
}

export function formatClock(date = new Date()) {
  return new Intl.DateTimeFormat(current === "zh" ? "zh-CN" : "en-GB", {
    hour: "2-digit", minute: "2-digit", second: "2-digit", hour12: false,
  }).format(date);
}

/** Seconds as m:ss (or h:mm:ss), rounding up so a countdown never shows 0:00 while time is left. */
export function formatDuration(totalSeconds) {
  const s = Math.max(0, Math.ceil(totalSeconds));
  const hours = Math.floor(s / 3600);
  const minutes = Math.floor((s % 3600) / 60);
  const secs = String(s % 60).padStart(2, "0");
  return hours ? `${hours}:${String(minutes).padStart(2, "0")}:${secs}` : `${minutes}:${secs}`;
}
