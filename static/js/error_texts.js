// What an API error says to the reader, in their language, by the error's code (issue 20, item 5).
// The server's own "message" is English prose for logs and developers; a page shows the catalog's text for
// the code instead (key error_code.<code> in translations/<lang>/LC_MESSAGES/messages.po), so no English
// sentence ends up inside a Chinese one. tests/routes/test_error_texts.py checks that every code the server
// can send has a text in every catalog.

import { language, t } from "./i18n.js";

function errorCodeText(code, vars = {}) {
  const key = `error_code.${code}`;
  const text = t(key, vars);
  return text === key ? null : text;
}

/** One of zxcvbn's feedback sentences in the reader's language ("" for none): the catalogs' zxcvbn.<sentence>,
 * whose English text is zxcvbn's own. */
export function passwordFeedbackText(sentence) {
  if (!sentence) return "";
  const key = `zxcvbn.${sentence}`;
  const text = t(key);
  return text === key ? "" : text;
}

/** The text for an ApiError (or anything with a code and details) in the reader's language. */
export function apiErrorText(err) {
  const details = err.details || {};
  const text = errorCodeText(err.code, details);
  if (!text) return t("error_code.unknown_code", { code: err.code || err.status || "?" });
  if (err.code !== "weak_password") return text;
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
  [/^not shown$/, { zh: "根据你之前的回答，这道题不需要回答。", en: "Given your earlier answer, this question is not asked." }],
];

/** One item's problem from the server (e.g. "must be between 1 and 7") in the reader's language. */
export function itemProblemText(reason) {
  const lang = language() === "en" ? "en" : "zh";
  for (const [pattern, texts] of ITEM_PROBLEMS) {
    if (pattern.test(reason)) return String(reason).replace(pattern, texts[lang]);
  }
  return t("error_code.invalid_answers");
}
