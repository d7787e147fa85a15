// The page's own words, in the reader's language. They come from the server's gettext catalogs
// (translations/<lang>/LC_MESSAGES/messages.po), the same files the server's pages read: GET /i18n/messages.json
// holds every catalog, loaded once before any page module runs (top-level await), so t() stays synchronous and
// switching language needs no request. Adding a language is adding a catalog (docs/translations.md). Study content
// (consent, task texts, questionnaire items) comes from the server in the participant's language.
//
// Which language a page opens in: an explicit `lang` in the link (?lang=en), then the reader's last
// explicit choice on this browser (the language button, kept in localStorage), then the browser's
// languages (navigator.languages, among those the study offers), then the study's default_language
// (the participant page settles that once /api/study has answered: settleLanguage). Once logged in,
// the account's language (the last explicit choice, kept on the server: POST /api/auth/language)
// applies, unless the reader chose one on this very page (the link's lang, or the button on the
// login page): that choice is then sent to the server instead of being overridden.

import { languageTag, nextLanguage } from "./core/language.js";

const STORAGE_KEY = "memorylab.language";

async function loadCatalogs() {
  for (let attempt = 1; ; attempt += 1) {
    try {
      const response = await fetch("/i18n/messages.json", { credentials: "same-origin" });
      if (response.ok) return await response.json();
      throw new Error(`HTTP ${response.status}`);
    } catch (err) {
      // without its words the page cannot speak: try a few times (a restarting server), then show the keys
      if (attempt >= 3) {
        console.error("the interface's words could not be loaded", err);
        return { languages: ["zh", "en"], fallback: "en", messages: { zh: {}, en: {} } };
      }
      await new Promise((resolve) => { setTimeout(resolve, 500 * attempt); });
    }
  }
}

const CATALOGS = await loadCatalogs();
const SUPPORTED = CATALOGS.languages;
const MESSAGES = CATALOGS.messages;
const TAGS = CATALOGS.tags || {};  // each catalog's BCP 47 tag (its header's Language), e.g. zh -> zh-CN
// the languages the language button goes round: every catalog, or those the study speaks once settled
let offered = SUPPORTED;

const listeners = new Set();

function supportedBase(tag, offered = SUPPORTED) {
  const base = String(tag || "").toLowerCase().split(/[-_]/)[0];
  return offered.includes(base) ? base : null;
}

function linkLanguage() {
  return supportedBase(new URLSearchParams(location.search).get("lang"));
}

function storedLanguage() {
  try {
    return supportedBase(localStorage.getItem(STORAGE_KEY));
  } catch {
    return null;  // storage refused (private mode): no remembered choice
  }
}

function remember(lang) {
  try {
    localStorage.setItem(STORAGE_KEY, lang);
  } catch {
    // not remembered on this browser; the account still keeps it once logged in
  }
}

// the explicit choice made on this page (the link's lang, or the language button), or null
let chosenHere = linkLanguage();
if (chosenHere) remember(chosenHere);

/** Whether the reader chose a language on this browser before (a page may then follow the browser's). */
export function hasStoredLanguage() {
  return storedLanguage() !== null;
}

/** The browser's first preferred language among ``offered`` (any Chinese locale counts as zh), or null. */
export function browserLanguage(offered = SUPPORTED) {
  const preferred = navigator.languages?.length ? navigator.languages : [navigator.language || ""];
  for (const tag of preferred) {
    const found = supportedBase(tag, offered);
    if (found) return found;
  }
  return null;
}

let current = linkLanguage() || storedLanguage() || browserLanguage()
  || (SUPPORTED.includes("zh") ? "zh" : CATALOGS.fallback);

/** The language explicitly chosen on this page (the link's lang or the language button), else null. */
export function chosenOnThisPage() {
  return chosenHere;
}

export function language() {
  return current;
}

/** The language the language button switches to: the next one offered (every catalog; on the participant page,
 * those the study speaks), going round; with two, the other one. */
export function otherLanguage() {
  return nextLanguage(current, offered);
}

/** The BCP 47 tag for the page and for dates, as the language's catalog declares it; English dates day-first. */
function localeTag(lang, forDates = false) {
  const tag = languageTag(lang, TAGS);
  return forDates && tag === "en" ? "en-GB" : tag;
}

function textIn(lang, key, vars = {}) {
  const text = MESSAGES[lang]?.[key] ?? MESSAGES[CATALOGS.fallback]?.[key] ?? key;
  return text.replace(/\{(\w+)\}/g, (match, name) => (name in vars ? String(vars[name]) : match));
}

/** The text for key in the current language, with {name} placeholders filled from vars. */
export function t(key, vars = {}) {
  return textIn(current, key, vars);
}

/** The language button names the language it switches to in that language's own words (its catalog's
 * app.language_name and app.switch_to_language) and marks them with its tag, so no page knows which languages
 * there are. */
export function labelLanguageButton(button) {
  const next = otherLanguage();
  button.textContent = textIn(next, "app.language_name");
  button.setAttribute("aria-label", textIn(next, "app.switch_to_language"));
  button.lang = localeTag(next);
}

function apply(lang) {
  if (!SUPPORTED.includes(lang) || lang === current) return false;
  current = lang;
  applyDocumentLanguage();
  listeners.forEach((fn) => fn(lang));
  return true;
}

/** The reader's explicit choice (the language button): remembered on this browser; listeners re-render.
 * Returns true when it changed. */
export function setLanguage(lang) {
  if (!SUPPORTED.includes(lang)) return false;
  chosenHere = lang;
  remember(lang);
  return apply(lang);
}

/** A language the page follows without the reader choosing it (the account's, the study's default):
 * not remembered on this browser. Returns true when it changed. */
export function adoptLanguage(lang) {
  return apply(lang);
}

/** Once the study's languages and default are known: the link's lang, else the remembered choice, else the
 * browser's languages among those offered, else the study's default. Returns the language settled on. From then
 * on the language button goes round the study's languages that have a catalog. */
export function settleLanguage(studyLanguages, fallback) {
  const languages = (studyLanguages || SUPPORTED).filter((lang) => SUPPORTED.includes(lang));
  if (languages.length) offered = languages;
  const stored = storedLanguage();
  const settled = linkLanguage() || (stored && languages.includes(stored) ? stored : null)
    || browserLanguage(languages) || (SUPPORTED.includes(fallback) ? fallback : current);
  apply(settled);
  return settled;
}

export function onLanguageChange(fn) {
  listeners.add(fn);
}

export function applyDocumentLanguage() {
  document.documentElement.lang = localeTag(current);
  document.querySelectorAll("[data-i18n]").forEach((el) => {
    el.textContent = t(el.dataset.i18n);
  });
}

/** A server timestamp (naive UTC with a Z) shown in the reader's local time. */
export function formatDateTime(iso, { seconds = false } = {}) {
  if (!iso) return "";
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return iso;
  return new Intl.DateTimeFormat(localeTag(current, true), {
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
  return new Intl.DateTimeFormat(localeTag(current, true), {
    month: "2-digit", day: "2-digit", hour: "2-digit", minute: "2-digit", hour12: false,
  }).format(date);
}

export function formatClock(date = new Date()) {
  return new Intl.DateTimeFormat(localeTag(current, true), {
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
