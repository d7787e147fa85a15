// Numbers and values as the admin console prints them (no DOM: node's test runner imports this file).

/** A value for a table cell: "–" for nothing, integers as they are, other numbers to `digits` decimals. */
export function fmt(value, digits = 3) {
  if (value === null || value === undefined || value === "") return "–";
  if (typeof value === "number") return Number.isInteger(value) ? String(value) : value.toFixed(digits);
  return String(value);
}
