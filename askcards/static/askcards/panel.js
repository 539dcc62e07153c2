// The askcards answer panel: a plain script, no build step.
// Protocol (SPEC §6.3): the server pushes ask_user_questions / ask_user_questions_cancelled, the
// page sends ask_user_questions_result and gets ask_user_questions_ack. On (re)connect the server
// sends every pending ask again, and — for the asks this page still shows as open, listed in
// ?known= — the reason each one ended while the page was away, so nothing is lost on a reconnect.
"use strict";

(function () {
  // What the person reads when an ask ends without their answer from this page (by reason).
  const ENDED = {
    submitted: "已在其他地方作答。",
    empty: "已在其他地方作答。",
    completed: "已收齐回应。",
    timeout: "已超时：未在规定时间内作答。",
    by_respondent: "已取消。",
    by_agent: "提问已被智能体取消。",
    by_operator: "提问已被管理员取消。",
    session_cancelled: "任务已取消，提问随之取消。",
    pause_failed: "当前任务未能暂停，此问题已失效。",
    superseded_by_question: "问题已被新的提问取代。",
    superseded_by_message: "你发送了新消息，问题已失效。",
    restart: "服务已重启，原问题上下文已失效。",
  };
  const STALE = "问题已失效。";
  const SUBMITTED = "已提交，回答已送达。";
  const NEED_ANSWER = "请至少选择一项或填写其他";
  const MAX_KNOWN = 50; // ids sent back on reconnect (the URL stays short)
  const RETRY_MIN_MS = 1000;
  const RETRY_MAX_MS = 15000;

  const list = document.getElementById("asks");
  const empty = document.getElementById("empty");
  const connection = document.getElementById("connection");
  const announce = document.getElementById("announce");
  const baseTitle = document.title;
  const asks = new Map(); // requestId -> {section, form, status, state: "open" | "sending" | "done", sent}
  let socket = null;
  let retryMs = RETRY_MIN_MS;

  function el(tag, attrs, text) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value !== undefined && value !== null) node.setAttribute(name, value);
    }
    if (text !== undefined) node.textContent = text; // never innerHTML: texts come from agents
    return node;
  }

  function refreshSummary() {
    const open = [...asks.values()].filter((entry) => entry.state !== "done").length;
    empty.hidden = open > 0;
    document.title = open ? `(${open}) ${baseTitle}` : baseTitle;
  }

  function setConnection(state, text) {
    connection.dataset.state = state;
    connection.textContent = text;
  }

  // ------------------------------------------------------------------ rendering an ask
  function renderAsk(message) {
    const id = message.requestId;
    const section = el("section", { class: "ask", id: `ask-${id}`, "aria-labelledby": `ask-${id}-title`, "data-request-id": id });
    section.append(el("h2", { id: `ask-${id}-title` }, message.questions.map((q) => q.header).join(" · ")));
    const meta = [`会话 ${message.sessionId}`];
    if (message.deadline) {
      meta.push(`截止 ${new Date(message.deadline).toLocaleString("zh-CN", { hour12: false })}`);
    }
    section.append(el("p", { class: "meta" }, meta.join(" · ")));

    const form = el("form", { novalidate: "" });
    message.questions.forEach((question, index) => form.append(renderQuestion(id, question, index)));
    const submit = el("button", { type: "submit", class: "submit" }, "提交");
    form.append(submit);
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      submitAsk(id);
    });
    section.append(form);

    const status = el("p", { class: "status", role: "status", "aria-live": "polite", tabindex: "-1" });
    section.append(status);
    list.append(section);
    asks.set(id, { section, form, status, questions: message.questions, state: "open", sent: false });
    refreshSummary();
  }

  function renderQuestion(id, question, index) {
    const prefix = `${id}-q${index}`;
    const fieldset = el("fieldset", { class: "question", "aria-describedby": `${prefix}-error` });
    const legend = el("legend");
    legend.append(el("span", { class: "header" }, question.header), el("span", { class: "text" }, question.question));
    fieldset.append(legend);
    fieldset.append(el("p", { class: "hint" }, question.multiSelect ? "可多选" : "单选"));
    const type = question.multiSelect ? "checkbox" : "radio";
    question.options.forEach((option, optionIndex) => {
      const inputId = `${prefix}-o${optionIndex}`;
      const row = el("div", { class: "option" });
      const input = el("input", { type, id: inputId, name: prefix, value: option.label });
      const label = el("label", { for: inputId }, option.label);
      row.append(input, label);
      if (option.description) {
        input.setAttribute("aria-describedby", `${inputId}-desc`);
        row.append(el("p", { class: "description", id: `${inputId}-desc` }, option.description));
      }
      fieldset.append(row);
    });
    const other = el("div", { class: "other" });
    other.append(
      el("label", { for: `${prefix}-other` }, "其他（可选）"),
      el("input", { type: "text", id: `${prefix}-other`, name: `${prefix}-other`, maxlength: "1000", autocomplete: "off" }),
    );
    fieldset.append(other);
    const error = el("p", { class: "error", id: `${prefix}-error` });
    error.hidden = true;
    fieldset.append(error);
    // Once flagged, the message goes away as soon as the question is answered.
    fieldset.addEventListener("input", () => {
      if (fieldset.getAttribute("aria-invalid") === "true") showValidity(fieldset, readQuestion(fieldset).valid);
    });
    return fieldset;
  }

  // ------------------------------------------------------------------ answering
  function readQuestion(fieldset) {
    // The Feishu rule: a question is answered by a selection or text in the other box.
    const selected = [...fieldset.querySelectorAll(".option input:checked")].map((input) => input.value);
    const custom = fieldset.querySelector(".other input").value.trim();
    return { selected, custom, valid: selected.length > 0 || custom !== "" };
  }

  function showValidity(fieldset, valid) {
    const error = fieldset.querySelector(".error");
    error.hidden = valid;
    error.textContent = valid ? "" : NEED_ANSWER;
    if (valid) fieldset.removeAttribute("aria-invalid");
    else fieldset.setAttribute("aria-invalid", "true");
  }

  function collect(entry) {
    const answers = [];
    let firstInvalid = null;
    entry.form.querySelectorAll("fieldset.question").forEach((fieldset, index) => {
      const { selected, custom, valid } = readQuestion(fieldset);
      showValidity(fieldset, valid);
      if (!valid && !firstInvalid) firstInvalid = fieldset.querySelector("input");
      answers.push({ question: entry.questions[index].question, selectedLabels: selected, customInput: custom || null });
    });
    if (firstInvalid) {
      firstInvalid.focus();
      return null;
    }
    return answers;
  }

  function submitAsk(id) {
    const entry = asks.get(id);
    if (!entry || entry.state !== "open") return;
    const answers = collect(entry);
    if (!answers) return;
    if (!socket || socket.readyState !== WebSocket.OPEN) {
      entry.status.textContent = "未连接到服务器，连接恢复后请再提交。";
      return;
    }
    entry.state = "sending";
    entry.sent = true;
    entry.answers = answers;
    setFormDisabled(entry, true);
    entry.status.textContent = "正在提交…";
    socket.send(JSON.stringify({ type: "ask_user_questions_result", requestId: id, answers }));
  }

  function setFormDisabled(entry, disabled) {
    entry.form.querySelectorAll("input, button").forEach((control) => {
      control.disabled = disabled;
    });
  }

  function finish(id, text, { refinable = false } = {}) {
    const entry = asks.get(id);
    if (!entry) return;
    if (entry.state === "done") {
      // A stale ack said only "no longer open"; the cancelled message that follows says why.
      if (entry.refinable) entry.status.textContent = text;
      entry.refinable = refinable;
      return;
    }
    entry.refinable = refinable;
    const hadFocus = entry.form.contains(document.activeElement);
    entry.state = "done";
    entry.form.remove();
    entry.section.classList.add("done");
    entry.status.textContent = text;
    if (hadFocus) entry.status.focus();
    refreshSummary();
  }

  function renderSummary(entry) {
    // What this person answered, as they will remember it (labels, then their own words).
    const summary = el("dl", { class: "summary" });
    entry.questions.forEach((question, index) => {
      const answer = entry.answers[index];
      // As the server maps it: a single select's own words replace its option; a multi select keeps both.
      const parts = question.multiSelect || !answer.customInput ? [...answer.selectedLabels] : [];
      if (answer.customInput) parts.push(answer.customInput);
      summary.append(el("dt", {}, question.header), el("dd", {}, parts.join("、")));
    });
    return summary;
  }

  // ------------------------------------------------------------------ protocol
  const handlers = {
    ask_user_questions(message) {
      if (asks.has(message.requestId)) return;
      renderAsk(message);
      // Screen readers hear about a new question without losing their place.
      announce.textContent = `新问题：${message.questions.map((q) => q.header).join("、")}`;
    },
    ask_user_questions_cancelled(message) {
      const entry = asks.get(message.requestId);
      if (!entry) return;
      if (message.reason === "submitted" && entry.sent) {
        finish(message.requestId, entry.state === "sending" ? "已作答。" : SUBMITTED);
      } else {
        finish(message.requestId, ENDED[message.reason] || STALE);
      }
    },
    ask_user_questions_ack(message) {
      const entry = asks.get(message.requestId);
      if (!entry || entry.state === "done") return;
      if (message.ok) {
        finish(message.requestId, SUBMITTED);
        entry.section.append(renderSummary(entry));
      } else if (typeof message.error === "string" && message.error.startsWith("invalid")) {
        entry.state = "open";
        entry.sent = false;
        setFormDisabled(entry, false);
        entry.status.textContent = `提交未被接受：${message.error.replace(/^invalid:\s*/, "")}`;
      } else {
        // Someone or something else ended it first; the cancelled message that follows says how.
        entry.sent = false;
        finish(message.requestId, STALE, { refinable: true });
      }
    },
  };

  function socketUrl() {
    const known = [...asks.entries()].filter(([, entry]) => entry.state !== "done").map(([id]) => id).slice(0, MAX_KNOWN);
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    const query = known.length ? `?known=${encodeURIComponent(known.join(","))}` : "";
    return scheme + location.host + list.dataset.socketPath + query;
  }

  function connect() {
    socket = new WebSocket(socketUrl());
    socket.addEventListener("open", () => {
      retryMs = RETRY_MIN_MS;
      setConnection("open", "已连接，新的问题会实时出现。");
      for (const entry of asks.values()) {
        if (entry.state === "sending") entry.state = "open"; // the ack was lost; the server re-sends what is pending
        if (entry.state === "open") setFormDisabled(entry, false);
      }
    });
    socket.addEventListener("message", (event) => {
      let message;
      try {
        message = JSON.parse(event.data);
      } catch (error) {
        return;
      }
      const handler = handlers[message && message.type];
      if (handler) handler(message);
    });
    socket.addEventListener("close", (event) => {
      if (event.code === 4401) {
        // The Django session ended: sign in again, then come back here.
        location.assign(`/login/?next=${encodeURIComponent(location.pathname)}`);
        return;
      }
      setConnection("closed", `连接已断开，${Math.round(retryMs / 1000)} 秒后重新连接…`);
      setTimeout(connect, retryMs);
      retryMs = Math.min(retryMs * 2, RETRY_MAX_MS);
    });
  }

  refreshSummary();
  connect();
})();
