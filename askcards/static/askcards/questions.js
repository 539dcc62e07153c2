// What the web panel (panel.js) and the MCP App (mcp_app.js) share: the texts a person reads and
// the ask_user_questions form (one fieldset per question: radio or checkbox options with their
// descriptions, the 其他 box, the Feishu rule that each question needs a choice or words). A plain
// script, no build step; the MCP App gets it inlined into its one HTML document.
"use strict";

window.askcards = (function () {
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
    host_gone: "智能体已停止等待。",
    host_handled: "已在终端处理。",
    caller_gone: "智能体已断开，不再等待这个回答。",
    declined: "已在 MCP 客户端拒绝回答。",
    dismissed: "已在 MCP 客户端关闭，未作答。",
    superseded_by_question: "问题已被新的提问取代。",
    superseded_by_message: "你发送了新消息，问题已失效。",
    restart: "服务已重启，原问题上下文已失效。",
  };
  const TEXTS = Object.freeze({
    ENDED: Object.freeze(ENDED),
    STALE: "问题已失效。",
    // Submitted, and recorded: that is all the page knows until the agent takes the result.
    SUBMITTED: "已提交。",
    DELIVERED: "已提交，回答已送达。",
    ANSWERING: "已作答。",
    NEED_ANSWER: "请至少选择一项或填写其他",
    SUBMIT: "提交",
    SENDING: "正在提交…",
    REFUSED: "提交未被接受：",
    OTHER: "其他（可选）",
    MULTI: "可多选",
    SINGLE: "单选",
    AGENT: "智能体",
    DEADLINE: "截止 ",
    CONNECTING: "正在连接…",
    // Where an answer was given, as the history names it (Ask/Respondent surface).
    SURFACES: Object.freeze({ web: "网页", dingtalk: "钉钉卡片", feishu: "飞书卡片", host: "MCP 客户端", host_app: "MCP 应用" }),
  });

  // How an ask ended, in the words of a page that did not end it: an answer given on a named
  // surface says where (「已在 MCP 客户端回答。」), anything else by its reason.
  function endedText(reason, surface) {
    const name = TEXTS.SURFACES[surface];
    if (name && (reason === "submitted" || reason === "empty")) return `已在${/^[A-Za-z]/.test(name) ? " " : ""}${name}回答。`;
    return ENDED[reason] || TEXTS.STALE;
  }

  function el(tag, attrs, text) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value !== undefined && value !== null && value !== false) node.setAttribute(name, value === true ? "" : value);
    }
    if (text !== undefined) node.textContent = text; // never innerHTML: texts come from agents
    return node;
  }

  function when(iso) {
    return new Date(iso).toLocaleString("zh-CN", { hour12: false });
  }

  // Who asks (the agent) and in which conversation, as a person recognises them.
  function renderHead(id, message) {
    const head = el("header", { class: "ask-head" });
    head.append(el("h2", { id: `ask-${id}-title` }, message.agent || TEXTS.AGENT));
    const meta = [];
    if (message.session) meta.push(message.session);
    if (message.deadline) meta.push(`${TEXTS.DEADLINE}${when(message.deadline)}`);
    head.append(el("p", { class: "meta" }, meta.join(" · ")));
    return head;
  }

  // One question: its header and text, single or multiple choice, each option's description,
  // and the 其他 box (at most textMax characters, the server's bound).
  function renderQuestion(id, question, index, textMax) {
    const prefix = `${id}-q${index}`;
    const fieldset = el("fieldset", { class: "question", "aria-describedby": `${prefix}-error` });
    const legend = el("legend");
    legend.append(el("span", { class: "header" }, question.header), el("span", { class: "text" }, question.question));
    fieldset.append(legend);
    fieldset.append(el("p", { class: "hint" }, question.multiSelect ? TEXTS.MULTI : TEXTS.SINGLE));
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
      el("label", { for: `${prefix}-other` }, TEXTS.OTHER),
      // A text area: an answer in one's own words may run to several lines.
      el("textarea", { id: `${prefix}-other`, name: `${prefix}-other`, rows: "1", maxlength: textMax, autocomplete: "off" }),
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

  function readQuestion(fieldset) {
    // The Feishu rule: a question is answered by a selection or text in the other box.
    const selected = [...fieldset.querySelectorAll(".option input:checked")].map((input) => input.value);
    const custom = fieldset.querySelector(".other textarea").value.trim();
    return { selected, custom, valid: selected.length > 0 || custom !== "" };
  }

  function showValidity(fieldset, valid) {
    const error = fieldset.querySelector(".error");
    error.hidden = valid;
    error.textContent = valid ? "" : TEXTS.NEED_ANSWER;
    if (valid) fieldset.removeAttribute("aria-invalid");
    else fieldset.setAttribute("aria-invalid", "true");
  }

  // The form's answers as the server takes them ([{question, selectedLabels, customInput}]), or
  // null with every unanswered question flagged and the first one focused.
  function collectAnswers(form, questions) {
    const answers = [];
    let firstInvalid = null;
    form.querySelectorAll("fieldset.question").forEach((fieldset, index) => {
      const { selected, custom, valid } = readQuestion(fieldset);
      showValidity(fieldset, valid);
      if (!valid && !firstInvalid) firstInvalid = fieldset.querySelector("input");
      answers.push({ question: questions[index].question, selectedLabels: selected, customInput: custom || null });
    });
    if (firstInvalid) {
      firstInvalid.focus();
      return null;
    }
    return answers;
  }

  // What this person answered, as they will remember it (labels, then their own words).
  function renderSummary(questions, answers) {
    const summary = el("dl", { class: "summary" });
    questions.forEach((question, index) => {
      const answer = answers[index];
      // As the server maps it: a single select's own words replace its option; a multi select keeps both.
      const parts = question.multiSelect || !answer.customInput ? [...answer.selectedLabels] : [];
      if (answer.customInput) parts.push(answer.customInput);
      summary.append(el("dt", {}, question.header), el("dd", {}, parts.join("、")));
    });
    return summary;
  }

  function setDisabled(form, disabled) {
    form.querySelectorAll("input, button, select, textarea").forEach((control) => {
      if (disabled) {
        control.dataset.wasDisabled = control.disabled ? "1" : "";
        control.disabled = true;
      } else {
        control.disabled = control.dataset.wasDisabled === "1";
      }
    });
  }

  return Object.freeze({ TEXTS, endedText, el, when, renderHead, renderQuestion, readQuestion, showValidity, collectAnswers, renderSummary, setDisabled });
})();
