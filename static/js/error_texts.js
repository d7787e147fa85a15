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

/** One item's problem from the server (details.items: a code such as "out_of_range") in the reader's language;
 * ``item`` gives the scale's ends the text may name. */
export function itemProblemText(code, item = {}) {
  const key = `item_problem.${code}`;
  const text = t(key, { min: item.min, max: item.max });
  return text === key ? t("error_code.invalid_answers") : text;
}
