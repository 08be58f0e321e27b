// The web chat: one conversation at a time, answers streamed over server-sent events.
"use strict";
(function () {
  const log = document.getElementById("log");
  const status = document.getElementById("status");
  const form = document.getElementById("composer");
  const input = document.getElementById("text");
  const send = document.getElementById("send");
  const picker = document.getElementById("files");
  const chips = document.getElementById("attached");
  let pending = []; // files to send with the next message (attach button or drag-and-drop)
  let conversation = null;
  let source = null;
  const bubbles = new Map(); // streamed message id -> element
  const cards = new Map(); // card id -> element
  const stops = new Map(); // run id -> the Stop button under its streaming reply

  function token() { return localStorage.getItem("agent-gateway-token") || ""; }
  // The API token goes in the Authorization header only, never in a URL. A state-changing request
  // is always JSON (an empty object when there is nothing to say): the gateway refuses other bodies.
  async function api(method, path, body) {
    if (body === undefined && method !== "GET") body = {};
    const form = body instanceof FormData; // multipart: the browser sets the Content-Type and boundary
    const headers = form ? {} : { "Content-Type": "application/json" };
    if (token()) headers.Authorization = "Bearer " + token();
    const r = await fetch(path, { method, headers, body: body === undefined ? undefined : form ? body : JSON.stringify(body) });
    if (r.status === 401) {
      const t = prompt("This gateway needs its API token:");
      if (t) { localStorage.setItem("agent-gateway-token", t); return api(method, path, body); }
    }
    const data = await r.json().catch(() => ({}));
    if (!r.ok) throw new Error(data.message || ("HTTP " + r.status));
    return data;
  }

  function esc(s) { return s.replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c])); }
  function inline(s) {
    return s
      .replace(/`([^`]+)`/g, "<code>$1</code>")
      .replace(/\*\*([^*]+)\*\*/g, "<strong>$1</strong>")
      .replace(/(^|[^*])\*([^*\s][^*]*)\*/g, "$1<em>$2</em>")
      .replace(/(^|\W)_([^_\s][^_]*)_(?=\W|$)/g, "$1<em>$2</em>")
      .replace(/\[([^\]]+)\]\((https?:[^)\s]+)\)/g, '<a href="$2" target="_blank" rel="noopener">$1</a>');
  }
  // A small Markdown subset: fenced code, headings, lists, paragraphs, inline marks. Escaped first.
  function markdown(text) {
    const out = [];
    const blocks = esc(text).split(/```/);
    blocks.forEach((block, i) => {
      if (i % 2 === 1) { out.push("<pre><code>" + block.replace(/^[\w-]*\n/, "") + "</code></pre>"); return; }
      block.split(/\n{2,}/).forEach((para) => {
        if (!para.trim()) return;
        const lines = para.split("\n");
        if (lines.every((l) => /^\s*([-*]|\d+\.)\s+/.test(l))) {
          const ordered = /^\s*\d+\./.test(lines[0]);
          out.push((ordered ? "<ol>" : "<ul>") + lines.map((l) => "<li>" + inline(l.replace(/^\s*([-*]|\d+\.)\s+/, "")) + "</li>").join("") + (ordered ? "</ol>" : "</ul>"));
        } else if (/^#{1,6}\s/.test(para)) {
          out.push("<p><strong>" + inline(para.replace(/^#{1,6}\s+/, "")) + "</strong></p>");
        } else {
          out.push("<p>" + lines.map(inline).join("<br>") + "</p>");
        }
      });
    });
    return out.join("");
  }

  function scroll() { log.scrollTop = log.scrollHeight; }
  function bubble(role, text, status) {
    const el = document.createElement("div");
    el.className = "msg " + role + (status ? " " + status : "");
    el.dataset.role = role;
    el.innerHTML = markdown(text);
    log.appendChild(el);
    scroll();
    return el;
  }
  function notice(text) {
    const el = document.createElement("div");
    el.className = "notice";
    el.textContent = text;
    log.appendChild(el);
    scroll();
  }

  // A call's arguments: what fits at a glance, then every character behind "Show all" (the decider
  // decides on all of them, never on a cut).
  const ARGS_HEAD = 1500;
  function argumentsOf(text) {
    const box = document.createElement("div");
    box.className = "args";
    const head = document.createElement("pre");
    head.textContent = text.length > ARGS_HEAD ? text.slice(0, ARGS_HEAD) : text;
    box.appendChild(head);
    if (text.length > ARGS_HEAD) {
      const more = document.createElement("details");
      const summary = document.createElement("summary");
      summary.textContent = "…and " + (text.length - ARGS_HEAD).toLocaleString("en") + " more characters: show all arguments";
      const full = document.createElement("pre");
      full.className = "full";
      full.textContent = text;
      more.appendChild(summary);
      more.appendChild(full);
      more.ontoggle = () => { head.hidden = more.open; };
      box.appendChild(more);
    }
    return box;
  }

  function renderCard(card) {
    let el = cards.get(card.card_id);
    if (!el) {
      el = document.createElement("div");
      el.className = "card";
      el.dataset.card = card.card_id;
      cards.set(card.card_id, el);
      log.appendChild(el);
    }
    el.innerHTML = "";
    const h = document.createElement("h4");
    h.textContent = card.pending ? "The agent wants to use a tool that needs approval" : "Tool approval";
    el.appendChild(h);
    card.items.forEach((item) => {
      const row = document.createElement("div");
      row.className = "item";
      row.innerHTML = "<div><strong>" + esc(item.headline || item.tool) + "</strong> <span class=who>(" + esc(item.capability) + ")</span></div>";
      row.appendChild(argumentsOf(item.arguments || ""));
      if (item.state === "pending") {
        [["approve", "Approve"], ["deny", "Deny"]].forEach(([decision, label]) => {
          const b = document.createElement("button");
          b.type = "button";
          b.textContent = label;
          b.dataset.decision = decision;
          b.onclick = () => decide(item.approval_id, decision, b);
          row.appendChild(b);
        });
      } else {
        const s = document.createElement("div");
        s.className = "who";
        s.textContent = item.state === "approved" ? "Approved by " + item.decided_by : item.state === "denied" ? "Denied by " + item.decided_by : "Expired: no decision in time";
        row.appendChild(s);
      }
      el.appendChild(row);
    });
    if (card.pending) {
      const all = document.createElement("button");
      all.type = "button";
      all.textContent = "Approve all in this conversation";
      all.dataset.decision = "approve_all";
      all.onclick = () => decide(card.card_id, "approve_all", all);
      el.appendChild(all);
    }
    const foot = document.createElement("div");
    foot.className = "who";
    foot.textContent = [card.pending ? card.deciders : "", card.note].filter(Boolean).join(" · ");
    el.appendChild(foot);
    scroll();
  }

  // `/memory`: the notes with their buttons; a click's answer is the card as it is now, drawn in place.
  function renderMemory(id, card, el) {
    if (!el) {
      el = document.createElement("div");
      el.className = "card memory";
      el.dataset.memory = id;
      log.appendChild(el);
    }
    el.innerHTML = "";
    const h = document.createElement("h4");
    h.textContent = card.title;
    el.appendChild(h);
    const button = (b) => {
      const x = document.createElement("button");
      x.type = "button";
      x.textContent = b.label;
      if (b.style) x.className = b.style;
      x.onclick = async () => {
        x.disabled = true;
        try {
          const r = await api("POST", "/api/v1/memory/click", { data: b.data });
          if (r.card) renderMemory(id, r.card, el);
          if (r.message) notice(r.message);
        } catch (err) { notice(err.message); }
        x.disabled = false;
      };
      return x;
    };
    card.notes.forEach((n) => {
      const row = document.createElement("div");
      row.className = "item";
      row.innerHTML = "<div><code>" + esc(n.label) + "</code> <span class=who>" + esc(n.detail) + "</span></div>";
      n.buttons.forEach((b) => row.appendChild(button(b)));
      el.appendChild(row);
    });
    [card.status].filter(Boolean).forEach((t) => { const p = document.createElement("div"); p.textContent = t; el.appendChild(p); });
    card.actions.forEach((b) => el.appendChild(button(b)));
    const foot = document.createElement("div");
    foot.className = "who";
    foot.textContent = card.footer;
    el.appendChild(foot);
    scroll();
  }

  // The Stop control sits under a streaming reply (outside the bubble, which each delta redraws).
  function stopControl(d) {
    const old = stops.get(d.run_id);
    if (old) { old.remove(); stops.delete(d.run_id); }
    const reply = bubbles.get(d.message_id);
    if (!d.present || !reply) return;
    const b = document.createElement("button");
    b.type = "button";
    b.className = "stop";
    b.textContent = "Stop";
    b.onclick = async () => {
      b.disabled = true;
      try { await api("POST", "/api/v1/runs/" + encodeURIComponent(d.run_id) + "/stop"); }
      catch (err) { notice(err.message); b.disabled = false; }
    };
    reply.after(b);
    stops.set(d.run_id, b);
  }

  async function decide(id, decision, button) {
    button.disabled = true;
    try { const r = await api("POST", "/api/v1/approvals/" + encodeURIComponent(id), { decision }); if (r.message) notice(r.message); }
    catch (e) { notice(e.message); button.disabled = false; }
  }

  // The conversation id comes from the URL fragment: encoded wherever it goes into a path.
  function path(tail) { return "/api/v1/conversations/" + encodeURIComponent(conversation) + tail; }

  async function load() {
    const data = await api("GET", path("/messages"));
    log.innerHTML = "";
    bubbles.clear();
    cards.clear();
    stops.clear();
    // Messages and approval cards in the order they happened.
    const items = data.messages.map((m) => ({ time: m.time, show: () => (m.role === "notice" ? notice(m.text) : bubble(m.role, m.text, m.status)) }))
      .concat((data.cards || []).map((c) => ({ time: c.time, show: () => renderCard(c) })));
    items.sort((a, b) => (a.time < b.time ? -1 : a.time > b.time ? 1 : 0));
    items.forEach((i) => i.show());
  }

  // EventSource cannot send headers: an authenticated call mints a short-lived token good for
  // this conversation's stream only. When the stream fails for good (the token expired while the
  // gateway was away), a fresh token opens it again.
  async function listen() {
    if (source) source.close();
    const id = conversation;
    const t = await api("POST", "/api/v1/stream-tokens", { conversation_id: id });
    if (id !== conversation) return; // another conversation was opened meanwhile
    source = new EventSource(path("/events") + "?stream_token=" + encodeURIComponent(t.token));
    const mine = source;
    source.onerror = () => {
      if (mine.readyState === EventSource.CLOSED && mine === source) {
        setTimeout(() => { if (mine === source) listen().catch((err) => notice(err.message)); }, 1000);
      }
    };
    source.addEventListener("delta", (e) => {
      const d = JSON.parse(e.data);
      let el = bubbles.get(d.message_id);
      if (!el) { el = bubble("assistant", "", "streaming"); bubbles.set(d.message_id, el); }
      el.dataset.text = d.text;
      el.innerHTML = markdown(d.text);
      scroll();
    });
    source.addEventListener("stop_control", (e) => stopControl(JSON.parse(e.data)));
    source.addEventListener("card", (e) => renderCard(JSON.parse(e.data).card));
    source.addEventListener("notice", (e) => notice(JSON.parse(e.data).text));
    source.addEventListener("report", (e) => bubble("report", JSON.parse(e.data).text, ""));
    source.addEventListener("memory_card", (e) => { const d = JSON.parse(e.data); renderMemory(d.id, d.card); });
    source.addEventListener("status", (e) => { status.textContent = JSON.parse(e.data).text; status.hidden = false; });
    source.addEventListener("run_end", () => { status.hidden = true; load().catch((err) => notice(err.message)); });
  }

  async function open(id) {
    conversation = id;
    localStorage.setItem("agent-gateway-conversation", id);
    location.hash = id;
    await load();
    await listen();
  }

  async function fresh() {
    const c = await api("POST", "/api/v1/conversations");
    await open(c.id);
  }

  function showAttached() {
    chips.replaceChildren(...pending.map((f, i) => {
      const chip = document.createElement("button");
      chip.type = "button";
      chip.className = "chip";
      chip.title = "Remove " + f.name;
      chip.textContent = f.name + " ✕";
      chip.onclick = () => { pending.splice(i, 1); showAttached(); };
      return chip;
    }));
  }
  function attach(files) { pending = pending.concat(Array.from(files)); showAttached(); }
  picker.addEventListener("change", () => { attach(picker.files); picker.value = ""; });
  document.addEventListener("dragover", (e) => { e.preventDefault(); document.body.classList.add("dropping"); });
  document.addEventListener("dragleave", (e) => { if (!e.relatedTarget) document.body.classList.remove("dropping"); });
  document.addEventListener("drop", (e) => {
    e.preventDefault();
    document.body.classList.remove("dropping");
    if (e.dataTransfer && e.dataTransfer.files.length) attach(e.dataTransfer.files);
  });

  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const text = input.value;
    if (!text.trim() && !pending.length) return;
    send.disabled = true;
    const names = pending.map((f) => f.name);
    const mine = bubble("user", text + (names.length ? "\n\n[Files: " + names.join(", ") + "]" : ""), "");
    try {
      let body = { text };
      if (pending.length) {
        body = new FormData();
        body.append("text", text);
        for (const f of pending) body.append("file", f, f.name);
      }
      await api("POST", path("/messages"), body);
      input.value = "";
      pending = [];
      showAttached();
    } catch (err) { mine.remove(); notice(err.message); }
    finally { send.disabled = false; input.focus(); }
  });
  input.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); form.requestSubmit(); }
  });
  document.getElementById("new").onclick = () => fresh().catch((e) => notice(e.message));

  const start = location.hash.slice(1) || localStorage.getItem("agent-gateway-conversation");
  (start ? open(start).catch(fresh) : fresh()).catch((e) => notice(e.message));
})();
