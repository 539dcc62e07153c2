// The askcards answer panel: a plain script, no build step.
// Protocol (SPEC §6.3): the server pushes ask_user_questions / ask_user_questions_cancelled, the
// page sends ask_user_questions_result and gets ask_user_questions_ack. DingTalk forms arrive as
// dingtalk_form (the card's fields), are answered with dingtalk_form_result {action, form} in the
// card's value shapes and acknowledged by dingtalk_form_ack; dingtalk_form_responded says the
// person already responded to a collection that still waits for others. On (re)connect the server
// sends the recent history (history), every pending ask again, and — for the asks this page still
// shows as open, listed in ?known= — how each one ended while the page was away, so nothing is
// lost on a reconnect. history_add puts an ask that just ended on top of the history.
// A person with many waiting asks sees a page of them (the oldest): pending_more {count} says how
// many more wait, and the next one arrives as soon as one on the page ends or is answered. The
// asks listed in ?known= that still wait are not sent again: the page keeps showing them.
"use strict";

(function () {
  // The texts and the question form shared with the MCP App (questions.js).
  const { TEXTS, endedText, el, when, renderHead, renderQuestion, collectAnswers, setDisabled } = window.askcards;
  const { ENDED, STALE, SUBMITTED, DELIVERED, ANSWERING, SURFACES } = TEXTS;
  // A DingTalk form: what the person reads after their own response (the card's private texts).
  const RESPONDED = {
    submitted: "你已提交。",
    empty: "你已提交，未填写任何内容。",
    cancelled: "你已取消填写。",
  };
  const WAITING_OTHERS = "等待其他填写人回应。";
  const FORM_REFUSED = {
    not_respondent: "你不是此问题的指定填写人，提交未被记录。",
    already: "你已回应过本次收集，以第一次回应为准。",
  };
  const HISTORY_SIZE = 10;
  const MAX_KNOWN = 50; // ids sent back on reconnect (the URL stays short)
  const RETRY_MIN_MS = 1000;
  const RETRY_MAX_MS = 15000;

  const list = document.getElementById("asks");
  // The longest text one box may hold: the server's bound per value (tools.ANSWER_TEXT_MAX_CHARS).
  const TEXT_MAX = list.dataset.textMaxChars;
  const empty = document.getElementById("empty");
  const more = document.getElementById("more");
  const connection = document.getElementById("connection");
  const announce = document.getElementById("announce");
  const historyList = document.getElementById("history-list");
  const historyEmpty = document.getElementById("history-empty");
  const baseTitle = document.title;
  // requestId -> {kind, section, form, status, state: "open" | "sending" | "done", sent, ...}
  const asks = new Map();
  let history = []; // the server's history items, newest first
  let waitingMore = 0; // asks waiting beyond the page (pending_more)
  let socket = null;
  let retryMs = RETRY_MIN_MS;

  function refreshSummary() {
    const open = [...asks.values()].filter((entry) => entry.state !== "done").length + waitingMore;
    empty.hidden = open > 0;
    more.hidden = waitingMore === 0;
    more.textContent = waitingMore ? `还有 ${waitingMore} 个问题等待回答` : "";
    document.title = open ? `(${open}) ${baseTitle}` : baseTitle;
  }

  function setConnection(state, text) {
    connection.dataset.state = state;
    connection.textContent = text;
  }

  // ------------------------------------------------------------------ rendering an ask
  function renderShell(id, message) {
    const section = el("section", { class: "ask", id: `ask-${id}`, "aria-labelledby": `ask-${id}-title`, "data-request-id": id });
    section.append(renderHead(id, message));
    const form = el("form", { novalidate: "" });
    const status = el("p", { class: "status", role: "status", "aria-live": "polite", tabindex: "-1" });
    return { section, form, status };
  }

  function renderAsk(message) {
    const id = message.requestId;
    const { section, form, status } = renderShell(id, message);
    message.questions.forEach((question, index) => form.append(renderQuestion(id, question, index, TEXT_MAX)));
    const submit = el("button", { type: "submit", class: "submit" }, TEXTS.SUBMIT);
    form.append(submit);
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      submitAsk(id);
    });
    section.append(form, status);
    list.append(section);
    asks.set(id, { kind: "questions", section, form, status, questions: message.questions, state: "open", sent: false });
    refreshSummary();
  }

  // ------------------------------------------------------------------ DingTalk forms
  // The 13 field types of the DingTalk tool, each read back in the value shape the card sends
  // (SELECT {index, value}, MULTI_SELECT {index: [], value: []}, CHECKBOX_GROUP "v",
  // MULTI_CHECKBOX_GROUP ["v"], TEXT_ARRAY ["t"], NUMBER n, CHECKBOX / SWITCH true|false, DATE
  // "YYYY-MM-DD", TIME "HH:MM", DATETIME "YYYY-MM-DD HH:MM"). The server checks it again.
  const CHOICE_TYPES = new Set(["SELECT", "MULTI_SELECT", "CHECKBOX_GROUP", "MULTI_CHECKBOX_GROUP"]);

  function defaultOf(field) {
    return field.defaultValue !== undefined ? field.defaultValue : field.defautValue;
  }

  function chosenValues(value) {
    // A default or value in any of the card's choice shapes, as a list of option values.
    if (value === undefined || value === null) return [];
    if (Array.isArray(value)) return value.map(String);
    if (typeof value === "object") return chosenValues(value.value);
    return [String(value)];
  }

  function renderForm(message) {
    const id = message.requestId;
    const { section, form, status } = renderShell(id, message);
    const intro = el("div", { class: "form-intro" });
    intro.append(el("h3", { class: "form-title" }, message.title));
    if (message.description && message.description !== message.title) {
      intro.append(el("p", { class: "form-desc" }, message.description));
    }
    if (message.targeted) {
      intro.append(el("p", { class: "hint" }, `定向收集（共 ${message.respondents} 位填写人）：你的回答只代表你自己，收齐或截止后结果返回发起会话。`));
    }
    section.append(intro);
    const controls = [];
    message.fields.forEach((field, index) => {
      if (field.hidden) return; // sent as its default, never shown (as on the card)
      const control = renderField(id, field, index);
      controls.push(control);
      form.append(control.node);
    });
    const buttons = el("div", { class: "buttons" });
    const submit = el("button", { type: "submit", class: "submit" }, "提交");
    const cancel = el("button", { type: "button", class: "cancel" }, "取消");
    buttons.append(submit, cancel);
    form.append(buttons);
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      submitForm(id, "submit");
    });
    cancel.addEventListener("click", () => submitForm(id, "cancel"));
    section.append(form, status);
    list.append(section);
    asks.set(id, { kind: "form", section, form, status, fields: message.fields, controls, targeted: message.targeted, state: "open", sent: false });
    refreshSummary();
  }

  function renderField(id, field, index) {
    const prefix = `${id}-f${index}`;
    const type = field.type;
    const def = defaultOf(field);
    const readOnly = Boolean(field.readOnly);
    const grouped = CHOICE_TYPES.has(type) && type !== "SELECT";
    const node = el(grouped || type === "TEXT_ARRAY" ? "fieldset" : "div", {
      class: `field field-${type.toLowerCase()}`, "data-field": field.name, "aria-describedby": `${prefix}-error`,
    });
    const title = el(grouped || type === "TEXT_ARRAY" ? "legend" : "label", grouped || type === "TEXT_ARRAY" ? {} : { for: `${prefix}-input` });
    title.append(el("span", { class: "label" }, field.label || field.name));
    if (field.required && !readOnly) title.append(el("span", { class: "required", "aria-hidden": "true" }, " *"));
    const error = el("p", { class: "error", id: `${prefix}-error` });
    error.hidden = true;
    let read; // () => the value to send, or undefined for "not filled"

    if (type === "CHECKBOX" || type === "SWITCH") {
      const row = el("div", { class: "option" });
      const input = el("input", {
        type: "checkbox", id: `${prefix}-input`, name: prefix, role: type === "SWITCH" ? "switch" : undefined,
        required: field.required && !readOnly, disabled: readOnly,
      });
      input.checked = def === true;
      // A switch always has a state; a checkbox left alone sends nothing unless it has a default.
      read = () => (type === "SWITCH" || input.checked || typeof def === "boolean" ? input.checked : undefined);
      const label = el("label", { for: `${prefix}-input` });
      label.append(title.firstChild);
      if (field.required && !readOnly) label.append(el("span", { class: "required", "aria-hidden": "true" }, " *"));
      row.append(input, label);
      node.append(row);
    } else if (type === "SELECT") {
      node.append(title);
      const select = el("select", { id: `${prefix}-input`, name: prefix, required: field.required && !readOnly, disabled: readOnly });
      select.append(el("option", { value: "" }, field.placeholder || "请选择"));
      const chosen = chosenValues(def);
      (field.options || []).forEach((option, optionIndex) => {
        const item = el("option", { value: String(optionIndex) }, option.text);
        if (chosen.includes(option.value)) item.selected = true;
        select.append(item);
      });
      read = () => {
        if (select.value === "") return undefined;
        const optionIndex = Number(select.value);
        return { index: optionIndex, value: field.options[optionIndex].value };
      };
      node.append(select);
    } else if (grouped) {
      node.append(title);
      const multiple = type !== "CHECKBOX_GROUP";
      node.append(el("p", { class: "hint" }, multiple ? "可多选" : "单选"));
      const chosen = chosenValues(def);
      const inputs = (field.options || []).map((option, optionIndex) => {
        const inputId = `${prefix}-o${optionIndex}`;
        const row = el("div", { class: "option" });
        const input = el("input", { type: multiple ? "checkbox" : "radio", id: inputId, name: prefix, value: option.value, disabled: readOnly });
        input.checked = chosen.includes(option.value);
        row.append(input, el("label", { for: inputId }, option.text));
        node.append(row);
        return input;
      });
      read = () => {
        const picked = [];
        inputs.forEach((input, optionIndex) => {
          if (input.checked) picked.push(optionIndex);
        });
        const values = picked.map((optionIndex) => field.options[optionIndex].value);
        if (type === "CHECKBOX_GROUP") return values.length ? values[0] : undefined;
        if (type === "MULTI_CHECKBOX_GROUP") return values.length ? values : undefined;
        return values.length ? { index: picked, value: values } : undefined; // MULTI_SELECT
      };
    } else if (type === "TEXT_ARRAY") {
      node.append(title);
      const items = el("div", { class: "items" });
      const add = el("button", { type: "button", class: "add", disabled: readOnly }, field.addText || "添加一项");
      let count = 0;
      const addItem = (value) => {
        count += 1;
        const row = el("div", { class: "item" });
        const input = el("input", {
          type: "text", maxlength: TEXT_MAX, autocomplete: "off", "aria-label": `${field.label || field.name} 第 ${count} 项`,
          placeholder: field.placeholder, disabled: readOnly,
        });
        input.value = value || "";
        const remove = el("button", { type: "button", class: "remove", disabled: readOnly, "aria-label": `删除第 ${count} 项` }, "删除");
        remove.addEventListener("click", () => row.remove());
        row.append(input, remove);
        items.append(row);
        return input;
      };
      (Array.isArray(def) ? def : []).forEach((value) => addItem(String(value)));
      if (!items.children.length) addItem("");
      add.addEventListener("click", () => addItem("").focus());
      read = () => {
        const values = [...items.querySelectorAll("input")].map((input) => input.value.trim()).filter((value) => value !== "");
        return values.length ? values : undefined;
      };
      node.append(items, add);
    } else {
      node.append(title);
      const common = {
        id: `${prefix}-input`, name: prefix, placeholder: field.placeholder, required: field.required && !readOnly,
        readonly: readOnly, autocomplete: "off",
      };
      let input;
      if (type === "TEXT_AREA") {
        input = el("textarea", { ...common, rows: String(field.minRows || 3), maxlength: TEXT_MAX });
      } else if (type === "NUMBER") {
        input = el("input", { ...common, type: "number", step: "any", inputmode: "decimal" });
      } else if (type === "DATE") {
        input = el("input", { ...common, type: "date" });
      } else if (type === "TIME") {
        input = el("input", { ...common, type: "time", step: "60" });
      } else if (type === "DATETIME") {
        input = el("input", { ...common, type: "datetime-local", step: "60" });
      } else {
        input = el("input", { ...common, type: "text", maxlength: TEXT_MAX }); // TEXT and unknown types
      }
      if (def !== undefined && def !== null) input.value = type === "DATETIME" ? String(def).replace(" ", "T") : String(def);
      read = () => {
        const text = type === "TEXT_AREA" ? input.value : input.value.trim();
        if (text.trim() === "") return undefined;
        if (type === "NUMBER") return Number(text);
        if (type === "DATETIME") return text.replace("T", " ").slice(0, 16);
        if (type === "TIME") return text.slice(0, 5);
        return text;
      };
      node.append(input);
    }
    node.append(error);
    const control = { field, node, error, read, readOnly };
    node.addEventListener("input", () => {
      if (node.getAttribute("aria-invalid") === "true") showFieldError(control, "");
    });
    return control;
  }

  function showFieldError(control, text) {
    control.error.hidden = !text;
    control.error.textContent = text;
    if (text) control.node.setAttribute("aria-invalid", "true");
    else control.node.removeAttribute("aria-invalid");
  }

  function requiredText(field) {
    if (typeof field.requiredMsg === "string" && field.requiredMsg.trim()) return field.requiredMsg.trim();
    return CHOICE_TYPES.has(field.type) ? `请选择「${field.label || field.name}」。` : `请填写「${field.label || field.name}」。`;
  }

  function collectForm(entry) {
    // The form as the card sends it. The page checks what it can (required, numbers) so the
    // person hears at once; the server checks everything again and has the last word.
    const form = {};
    let firstInvalid = null;
    for (const field of entry.fields) {
      if (field.hidden && defaultOf(field) !== undefined) form[field.name] = defaultOf(field);
    }
    for (const control of entry.controls) {
      const { field } = control;
      if (control.readOnly) {
        if (defaultOf(field) !== undefined) form[field.name] = defaultOf(field);
        continue;
      }
      const value = control.read();
      let problem = "";
      if (value === undefined && field.required) problem = requiredText(field);
      else if (field.type === "NUMBER" && value !== undefined && !Number.isFinite(value)) problem = `「${field.label || field.name}」应为数字。`;
      showFieldError(control, problem);
      if (problem && !firstInvalid) firstInvalid = control.node.querySelector("input, select, textarea");
      if (value !== undefined) form[field.name] = value;
    }
    if (firstInvalid) {
      firstInvalid.focus();
      return null;
    }
    return form;
  }

  function submitForm(id, action) {
    const entry = asks.get(id);
    if (!entry || entry.state !== "open") return;
    const form = action === "submit" ? collectForm(entry) : {};
    if (!form) return;
    if (!socket || socket.readyState !== WebSocket.OPEN) {
      entry.status.textContent = "未连接到服务器，连接恢复后请再提交。";
      return;
    }
    entry.state = "sending";
    entry.sent = true;
    setFormDisabled(entry, true);
    entry.status.textContent = action === "submit" ? "正在提交…" : "正在取消…";
    socket.send(JSON.stringify({ type: "dingtalk_form_result", requestId: id, action, form }));
  }

  function respondedText(entry, status) {
    const text = RESPONDED[status] || SUBMITTED;
    return entry.targeted ? `${text}${WAITING_OTHERS}` : text;
  }

  // ------------------------------------------------------------------ answering
  function collect(entry) {
    return collectAnswers(entry.form, entry.questions);
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
    setDisabled(entry.form, disabled);
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
    return window.askcards.renderSummary(entry.questions, entry.answers);
  }

  function answersList(answers) {
    // [{question, answer}] as the server recorded them (option texts, lists joined).
    const summary = el("dl", { class: "summary" });
    for (const item of answers || []) summary.append(el("dt", {}, item.question), el("dd", {}, item.answer));
    return summary;
  }

  // ------------------------------------------------------------------ history
  function historyStatus(item) {
    if (item.respondent === "submitted") return `已回答${SURFACES[item.surface] ? `（${SURFACES[item.surface]}）` : ""}`;
    if (item.respondent === "empty") return "已提交，未填写任何内容";
    if (item.respondent === "cancelled") return "已取消填写";
    return (ENDED[item.reason] || STALE).replace(/。$/, "");
  }

  function renderHistory() {
    historyList.replaceChildren();
    for (const item of history) {
      const row = el("li", { class: "past", "data-history-id": item.requestId });
      const head = el("p", { class: "past-head" });
      head.append(el("strong", {}, item.title || "问题"), el("span", { class: "past-status" }, ` · ${historyStatus(item)}`));
      row.append(head);
      const meta = [item.agent, item.session];
      if (item.closedAt) meta.push(when(item.closedAt));
      row.append(el("p", { class: "meta" }, meta.filter(Boolean).join(" · ")));
      if (item.purged) row.append(el("p", { class: "hint" }, "回答已按保留期限删除。"));
      else if (item.answers && item.answers.length) row.append(answersList(item.answers));
      historyList.append(row);
    }
    historyEmpty.hidden = history.length > 0;
  }

  // ------------------------------------------------------------------ protocol
  const handlers = {
    history(message) {
      history = (message.asks || []).slice(0, HISTORY_SIZE);
      renderHistory();
    },
    pending_more(message) {
      waitingMore = Number.isInteger(message.count) && message.count > 0 ? message.count : 0;
      refreshSummary();
    },
    history_add(message) {
      history = [message.ask, ...history.filter((item) => item.requestId !== message.ask.requestId)].slice(0, HISTORY_SIZE);
      renderHistory();
    },
    ask_user_questions(message) {
      if (asks.has(message.requestId)) return;
      renderAsk(message);
      // Screen readers hear about a new question without losing their place.
      announce.textContent = `新问题：${message.questions.map((q) => q.header).join("、")}`;
    },
    dingtalk_form(message) {
      if (asks.has(message.requestId)) return;
      renderForm(message);
      announce.textContent = `新问题：${message.title}`;
    },
    dingtalk_form_responded(message) {
      // Responded here (another tab) or on the card; the collection still waits for others.
      const entry = asks.get(message.requestId);
      if (!entry || entry.state === "done") return;
      entry.responded = message.status;
      finish(message.requestId, respondedText(entry, message.status));
      if (message.answers && message.answers.length) entry.section.append(answersList(message.answers));
    },
    ask_user_questions_cancelled(message) {
      const entry = asks.get(message.requestId);
      if (!entry) return;
      if (message.reason === "submitted" && entry.sent) {
        entry.answeredHere = true;
        finish(message.requestId, entry.delivered ? DELIVERED : entry.state === "sending" ? ANSWERING : SUBMITTED);
      } else if (entry.kind === "form" && entry.responded) {
        // Their own response is already shown. An ordinary form ended with it; a collection
        // ends later (everyone responded, the deadline, the initiator): say how.
        if (entry.targeted) entry.status.textContent = `${RESPONDED[entry.responded] || SUBMITTED}${ENDED[message.reason] || STALE}`;
      } else {
        finish(message.requestId, endedText(message.reason, message.surface));
      }
    },
    ask_user_questions_delivered(message) {
      // The agent took the result (its waiter, a task read, its events feed or webhook).
      const entry = asks.get(message.requestId);
      if (!entry) return;
      entry.delivered = true;
      if (entry.state === "done" && entry.answeredHere) entry.status.textContent = DELIVERED;
    },
    ask_user_questions_ack(message) {
      const entry = asks.get(message.requestId);
      if (!entry || entry.state === "done") return;
      if (message.ok) {
        entry.answeredHere = true;
        finish(message.requestId, entry.delivered ? DELIVERED : SUBMITTED);
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
    dingtalk_form_ack(message) {
      const entry = asks.get(message.requestId);
      if (!entry) return;
      if (message.ok) {
        entry.responded = message.status;
        if (entry.state === "done") {
          // The ending (an ordinary card closes with this answer) arrived first.
          entry.status.textContent = RESPONDED[message.status] || SUBMITTED;
        } else {
          finish(message.requestId, respondedText(entry, message.status));
        }
        if (message.answers && message.answers.length && !entry.section.querySelector(".summary")) {
          entry.section.append(answersList(message.answers));
        }
        return;
      }
      if (entry.state === "done") return;
      if (typeof message.error === "string" && message.error.startsWith("invalid")) {
        entry.state = "open";
        entry.sent = false;
        setFormDisabled(entry, false);
        const text = message.error.replace(/^invalid:\s*/, "");
        const control = message.field && entry.controls.find((item) => item.field.name === message.field);
        if (control) {
          showFieldError(control, text);
          const input = control.node.querySelector("input, select, textarea");
          if (input) input.focus();
        }
        entry.status.textContent = `提交未被接受：${text}`;
      } else if (FORM_REFUSED[message.error]) {
        finish(message.requestId, FORM_REFUSED[message.error]);
      } else {
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
