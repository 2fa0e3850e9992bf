// The console's entry point: login, the three pages (hash routes #query, #cluster,
// #storage) and the header's live rates.

import { ApiError, clearToken, json, setToken, token } from "./api.js";
import { showError } from "./dom.js";
import { initQuery, loadDatabases } from "./query.js";
import { loadCluster } from "./cluster.js";
import { loadStorage } from "./storage.js";
import { startRates, stopRates } from "./rates.js";

const PAGES = ["query", "cluster", "storage"];
/** How often a page refreshes while it is shown (the query page does not). */
const REFRESH_MS = { cluster: 2000, storage: 5000 };
const LOADERS = { cluster: loadCluster, storage: loadStorage };

const $ = (id) => document.getElementById(id);
let refreshTimer = null;
let loggedIn = false;

function showLogin(message) {
  loggedIn = false;
  clearToken();
  stopRates();
  clearInterval(refreshTimer);
  for (const p of PAGES) $(`${p}-page`).hidden = true;
  $("nav").hidden = true;
  $("logout").hidden = true;
  $("login-page").hidden = false;
  $("token").value = "";
  showError($("login-error"), message);
  $("token").focus();
}

function showPage() {
  const page = PAGES.find((p) => `#${p}` === location.hash) || "query";
  $("login-page").hidden = true;
  $("nav").hidden = false;
  $("logout").hidden = !token();
  for (const p of PAGES) $(`${p}-page`).hidden = p !== page;
  for (const a of document.querySelectorAll("#nav a")) {
    a.classList.toggle("active", a.dataset.page === page);
  }
  clearInterval(refreshTimer);
  if (page === "query") loadDatabases();
  const load = LOADERS[page];
  if (load) {
    load();
    refreshTimer = setInterval(() => document.hidden || load(), REFRESH_MS[page]);
  }
}

/** Checks the token against the node: 401 means unknown; any other answer means the node knows it. */
async function login(value) {
  setToken(value);
  try {
    await json("/api/v1/cluster/status");
  } catch (e) {
    if (e instanceof ApiError && e.status === 401) {
      showLogin("The node does not know this token.");
      return;
    }
    // 403 (a write-only token) still logs in: pages say what the token may not see.
  }
  enter();
}

/** Into the console: rates sampled, pages shown (until the page is left or reloaded). */
function enter() {
  loggedIn = true;
  $("token").value = "";
  startRates();
  showPage();
}

$("login-form").addEventListener("submit", (e) => {
  e.preventDefault();
  const value = $("token").value.trim();
  if (value) login(value);
});
// Logging out reloads the page, so nothing a page showed stays in it.
$("logout").addEventListener("click", () => {
  clearToken();
  location.replace("/ui");
});
window.addEventListener("hashchange", () => {
  if (loggedIn) showPage();
});

/** With a token from earlier in this tab, use it; without one, a node whose authentication is off (`--auth none`) needs none. */
async function start() {
  initQuery();
  if (token()) {
    login(token());
    return;
  }
  try {
    await json("/api/v1/cluster/status");
    enter();
  } catch {
    showLogin("");
  }
}

start();
