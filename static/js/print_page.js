// The consent copy's "print" button (the page allows no inline script).
document.getElementById("print-copy")?.addEventListener("click", () => window.print());
