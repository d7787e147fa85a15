// Which language a page shows, decided over plain values (no DOM: node's test runner imports this file).

/** A study text given per language ({zh, en}), in `lang`: else the Chinese, else any; a plain string as it is. */
export function localised(value, lang) {
  if (value && typeof value === "object") return value[lang] || value.zh || Object.values(value)[0] || "";
  return value || "";
}

// The account keeps the participant's last explicit choice of language: the page follows it, unless the
// participant chose one on this very page (the link's lang, or the button before logging in), which is
// then the newer choice and is stored on the account instead.
/** {store: lang} to write the page's choice to the account, {adopt: lang} to follow the account's, or {}. */
export function accountLanguage(chosenHere, user) {
  if (chosenHere && user.role === "participant" && chosenHere !== user.language) return { store: chosenHere };
  if (user.language) return { adopt: user.language };
  return {};
}

/** The language after `current` in `languages`, going round (the language button); the first when `current`
 * is not among them. With two languages, the other one. */
export function nextLanguage(current, languages) {
  if (!languages.length) return current;
  return languages[(languages.indexOf(current) + 1) % languages.length];
}

/** The BCP 47 tag of a catalog language: the tag its catalog declares (`tags`, from /i18n/messages.json), else
 * the folder name written as a tag (pt_BR -> pt-BR). */
export function languageTag(lang, tags = {}) {
  return tags[lang] || String(lang).replace(/_/g, "-");
}
