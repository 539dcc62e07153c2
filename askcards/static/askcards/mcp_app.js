// The askcards MCP App: the form of an ask_user_questions call, rendered by a host that shows MCP
// Apps (io.modelcontextprotocol/ui, protocol 2026-01-26) in a sandboxed iframe. A plain script,
// inlined with questions.js into the ui:// resource's one HTML document; it talks to the host only
// (JSON-RPC over postMessage), never to the network.
//
// The host sends the call's arguments (ui/notifications/tool-input) once the app has initialized,
// and the call's result (ui/notifications/tool-result) when it returns, that is when the ask has
// ended. The arguments carry no ask id: the app asks askcards for the ask those questions made in
// this conversation (askcards_app_ask, an app-only tool, called through the host), and answers it
// with askcards_app_answer. The first answer wins, on whichever surface: an answer given on the
// panel or a card first closes this form with the panel's words.
"use strict";

(function () {
  const { TEXTS, el, renderHead, renderQuestion, collectAnswers, renderSummary, setDisabled } = window.askcards;
  const { ENDED, STALE, SUBMITTED, DELIVERED } = TEXTS;
  const APP_PROTOCOL = "2026-01-26";
  const FIND_TOOL = "askcards_app_ask";
  const ANSWER_TOOL = "askcards_app_answer";
  const SURFACE = "host_app";
  const REQUEST_TIMEOUT_MS = 60_000;
  // The call's ask may not be delivered yet when the form is shown: look again, a bounded while.
  const FIND_EVERY_MS = 1000;
  const FIND_TRIES = 60;

  const list = document.getElementById("asks");
  const connection = document.getElementById("connection");
  const TEXT_MAX = list.dataset.textMaxChars;

  // ------------------------------------------------------------------ JSON-RPC with the host
  let nextId = 1;
  const waiting = new Map(); // request id -> {resolve, reject, timer}

  function post(message) {
    // The host's origin is not known inside its sandbox; what is posted is this form's own data.
    window.parent.postMessage({ jsonrpc: "2.0", ...message }, "*");
  }

  function request(method, params) {
    const id = nextId++;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        waiting.delete(id);
        reject(new Error(`${method}: no answer from the host`));
      }, REQUEST_TIMEOUT_MS);
      waiting.set(id, { resolve, reject, timer });
      post({ id, method, params });
    });
  }

  function notify(method, params) {
    post({ method, params });
  }

  const notifications = {
    "ui/notifications/tool-input": (params) => showInput(params && params.arguments),
    "ui/notifications/tool-result": (params) => showResult(params),
    "ui/notifications/tool-cancelled": () => finish(ENDED.by_agent),
  };
  const requests = {
    "ui/resource-teardown": () => ({}),
    ping: () => ({}),
  };

  window.addEventListener("message", (event) => {
    if (event.source !== window.parent) return; // only the host speaks to this form
    const message = event.data;
    if (!message || typeof message !== "object" || message.jsonrpc !== "2.0") return;
    if (message.method === undefined) {
      const pending = waiting.get(message.id);
      if (!pending) return;
      waiting.delete(message.id);
      clearTimeout(pending.timer);
      if (message.error) pending.reject(new Error(String(message.error.message || "error")));
      else pending.resolve(message.result);
    } else if (message.id !== undefined) {
      const handler = requests[message.method];
      if (handler) post({ id: message.id, result: handler(message.params) });
      else post({ id: message.id, error: { code: -32601, message: `Method not found: ${message.method}` } });
    } else {
      const handler = notifications[message.method];
      if (handler) handler(message.params || {});
    }
  });

  async function callTool(name, args) {
    const result = await request("tools/call", { name, arguments: args });
    if (result && result.isError) {
      const text = (result.content || []).map((item) => item.text || "").join(" ").trim();
      throw new Error(text || `${name} failed`);
    }
    return (result && result.structuredContent) || {};
  }

  // ------------------------------------------------------------------ the ask
  // phase: "input" (no arguments yet) | "finding" | "open" | "sending" | "done"
  const state = { phase: "input", questions: null, ask: null, section: null, form: null, status: null, answers: null, answeredHere: false };

  function showInput(args) {
    if (state.phase !== "input" || !args || !Array.isArray(args.questions) || !args.questions.length) return;
    state.questions = args.questions;
    state.phase = "finding";
    const section = el("section", { class: "ask", "aria-label": args.questions.map((q) => q.header).join("、") });
    const form = el("form", { novalidate: "" });
    args.questions.forEach((question, index) => form.append(renderQuestion("app", question, index, TEXT_MAX)));
    // A plain button, not a form submission: a host's sandbox may leave out allow-forms, which
    // blocks submit events (Chromium: "Blocked form submission ... 'allow-forms' ... not set").
    const button = el("button", { type: "button", class: "submit" }, TEXTS.SUBMIT);
    button.addEventListener("click", submit);
    form.append(button);
    form.addEventListener("submit", (event) => event.preventDefault());
    const status = el("p", { class: "status", role: "status", "aria-live": "polite", tabindex: "-1" });
    section.append(form, status);
    list.append(section);
    Object.assign(state, { section, form, status });
    setDisabled(form, true); // until askcards names the ask these questions made
    find();
  }

  async function find() {
    for (let tries = 0; tries < FIND_TRIES && state.phase === "finding"; tries += 1) {
      let found = null;
      try {
        found = (await callTool(FIND_TOOL, { questions: state.questions })).ask || null;
      } catch (error) {
        connection.textContent = String(error.message || error);
        return;
      }
      if (state.phase !== "finding") return; // the call's result came first
      if (found) {
        showAsk(found);
        return;
      }
      await new Promise((resolve) => setTimeout(resolve, FIND_EVERY_MS));
    }
    if (state.phase === "finding") finish(STALE);
  }

  function showAsk(ask) {
    state.ask = ask;
    connection.hidden = true;
    state.section.dataset.requestId = ask.requestId;
    state.section.setAttribute("aria-labelledby", `ask-${ask.requestId}-title`);
    state.section.prepend(renderHead(ask.requestId, ask));
    if (ask.status === "pending") {
      state.phase = "open";
      setDisabled(state.form, false);
    } else {
      finish(ENDED[ask.reason] || STALE);
    }
  }

  async function submit() {
    if (state.phase !== "open") return;
    const answers = collectAnswers(state.form, state.questions);
    if (!answers) return;
    state.phase = "sending";
    state.answers = answers;
    setDisabled(state.form, true);
    state.status.textContent = TEXTS.SENDING;
    let outcome;
    try {
      outcome = await callTool(ANSWER_TOOL, { askId: state.ask.requestId, answers });
    } catch (error) {
      reopen(String(error.message || error).replace(/^invalid:\s*/, ""));
      return;
    }
    if (state.phase !== "sending") return; // the call's result already said how it ended
    if (outcome.accepted) {
      finish(SUBMITTED, { answeredHere: true });
    } else {
      finish(ENDED[outcome.reason] || STALE); // answered or ended elsewhere first: nothing changed
    }
  }

  function reopen(why) {
    if (state.phase !== "sending") return;
    state.phase = "open";
    setDisabled(state.form, false);
    state.status.textContent = `${TEXTS.REFUSED}${why}`;
  }

  // The call returned: the ask has ended, and its result reached the host (so the agent).
  function showResult(result) {
    const structured = (result && result.structuredContent) || {};
    const ask = structured.ask || null;
    if (state.ask && ask && ask.id !== state.ask.requestId) return; // another call's result
    const here = ask && ask.status === "answered" && (ask.respondents || []).some((row) => row.surface === SURFACE);
    if (state.answeredHere || (here && state.phase === "sending")) {
      finish(DELIVERED, { answeredHere: true });
    } else if (state.phase !== "done") {
      finish(ask ? ENDED[ask.reason] || STALE : STALE);
    }
  }

  function finish(text, { answeredHere = false } = {}) {
    connection.hidden = true;
    if (!state.section) {
      state.phase = "done";
      return;
    }
    if (answeredHere && !state.answeredHere) {
      state.answeredHere = true;
      if (state.answers) state.section.append(renderSummary(state.questions, state.answers));
    }
    const hadFocus = state.form.contains(document.activeElement);
    state.phase = "done";
    state.form.remove();
    state.section.classList.add("done");
    state.status.textContent = text;
    if (hadFocus) state.status.focus();
  }

  // ------------------------------------------------------------------ start
  function reportSize() {
    // The content's own height (the document's would never drop below the iframe's).
    const box = document.body.getBoundingClientRect();
    notify("ui/notifications/size-changed", { width: Math.ceil(box.width), height: Math.ceil(box.height) });
  }

  async function start() {
    try {
      await request("ui/initialize", {
        protocolVersion: APP_PROTOCOL,
        appInfo: { name: "askcards", version: "1" },
        appCapabilities: { availableDisplayModes: ["inline"] },
      });
    } catch (error) {
      connection.textContent = String(error.message || error);
      return;
    }
    notify("ui/notifications/initialized", {});
    if (typeof ResizeObserver === "function") new ResizeObserver(reportSize).observe(document.body);
    reportSize();
  }

  start();
})();
