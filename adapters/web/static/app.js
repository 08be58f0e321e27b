// The web chat: the person's conversations in a sidebar, one open at a time, answers streamed over
// server-sent events. Everything an answer says is drawn by markdown.js (never as HTML).
"use strict";
(function () {
  const log = document.getElementById("log");
  const announce = document.getElementById("announce");
  const flashed = document.getElementById("flash");
  const sidebar = document.getElementById("sidebar");
  const list = document.getElementById("conversations");
  const more = document.getElementById("more");
  const search = document.getElementById("search");
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
  const openedAcrossReload = new Map(); // card id -> which of its <details> the person had opened
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

  const md = (text) => window.AgentMarkdown.render(text);
  function esc(s) { return s.replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c])); }
  function scroll() { log.scrollTop = log.scrollHeight; }
  function bubble(role, text, status) {
    const el = document.createElement("div");
    el.className = "msg " + role + (status ? " " + status : "");
    el.dataset.role = role;
    if (status === "streaming") el.setAttribute("aria-busy", "true"); // read once it is whole, not word by word
    el.replaceChildren(md(text));
    log.appendChild(el);
    scroll();
    return el;
  }
  // A line from the gateway itself (a command's answer, a mode switch): Markdown, like replies.
  function notice(text) {
    const el = document.createElement("div");
    el.className = "notice";
    el.replaceChildren(md(text));
    log.appendChild(el);
    scroll();
  }
  // The page's own news (an error, a button's answer): beside the conversation, not in it, so
  // redrawing the conversation from the store keeps it; gone with the next message sent.
  function flash(text) {
    flashed.textContent = text;
    flashed.hidden = false;
  }
  // Said aloud by a screen reader: what needs the person (a card), not every streamed word.
  function say(text) { announce.textContent = ""; setTimeout(() => { announce.textContent = text; }, 50); }

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
    // A card is drawn again when it comes again (the listing and the event stream both carry it): what
    // the person opened ("show all arguments") stays open, rather than snapping shut under their click.
    const opened = openedAcrossReload.get(card.card_id) || Array.from(el.querySelectorAll("details"), (d) => d.open);
    openedAcrossReload.delete(card.card_id);
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
    el.querySelectorAll("details").forEach((d, i) => { if (opened[i]) d.open = true; });
    scroll();
  }

  // `/memory`: the notes with their buttons; a click's answer is the card as it is now, drawn in place.
  function renderMemory(id, card, el) {
    if (!el) {
      el = document.createElement("div");
      el.className = "card memory";
      el.dataset.memory = id;
      el.setAttribute("role", "group");
      el.setAttribute("aria-label", card.title);
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
          if (r.message) flash(r.message);
        } catch (err) { flash(err.message); }
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
    [card.status].filter(Boolean).forEach((t) => { const p = document.createElement("div"); p.className = "status"; p.replaceChildren(md(t)); el.appendChild(p); });
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
      catch (err) { flash(err.message); b.disabled = false; }
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
  // Files the agent posted: fetched with the token (never in a URL), shown from a blob: an image
  // inline, speech (OGG, MP3) as an audio player, anything else as a download link under its name.
  async function blobOf(url) {
    const headers = token() ? { Authorization: "Bearer " + token() } : {};
    const r = await fetch(url, { headers });
    if (!r.ok) throw new Error("HTTP " + r.status);
    return URL.createObjectURL(await r.blob());
  }
  function renderFiles(share) {
    const el = bubble("assistant", share.caption || "", "final");
    for (const f of share.files) {
      if (/^image\/(png|jpeg|gif|webp)$/.test(f.media_type)) {
        const img = document.createElement("img");
        img.alt = f.name;
        img.className = "shared-file";
        blobOf(f.url).then((u) => { img.src = u; }).catch((err) => flash(err.message));
        el.appendChild(img);
      } else if (/^audio\/(ogg|mpeg)$/.test(f.media_type)) {
        const audio = document.createElement("audio");
        audio.controls = true;
        audio.className = "shared-file";
        audio.title = f.name;
        blobOf(f.url).then((u) => { audio.src = u; }).catch((err) => flash(err.message));
        el.appendChild(audio);
      } else {
        const a = document.createElement("a");
        a.textContent = f.name;
        a.download = f.name;
        a.href = "#";
        blobOf(f.url).then((u) => { a.href = u; }).catch((err) => flash(err.message));
        el.appendChild(a);
      }
    }
  }

  function path(tail) { return "/api/v1/conversations/" + encodeURIComponent(conversation) + tail; }

  async function load() {
    const data = await api("GET", path("/messages"));
    // The whole conversation is drawn again (a run's end, a notice): a card the person opened stays open.
    openedAcrossReload.clear();
    cards.forEach((el, id) => openedAcrossReload.set(id, Array.from(el.querySelectorAll("details"), (d) => d.open)));
    log.innerHTML = "";
    bubbles.clear();
    cards.clear();
    stops.clear();
    // Messages and approval cards in the order they happened.
    const show = (m) => {
      if (m.role === "notice") return notice(m.text);
      if (m.role === "memory" && m.card) return renderMemory("m" + m.id, m.card);
      const el = bubble(m.role, m.text, m.role === "command" ? "" : m.status);
      if (m.status === "streaming" && m.message_id) bubbles.set(m.message_id, el); // its next deltas redraw it
      return el;
    };
    const items = data.messages.map((m) => ({ time: m.time, show: () => show(m) }))
      .concat((data.cards || []).map((c) => ({ time: c.time, show: () => renderCard(c) })))
      .concat((data.files || []).map((f) => ({ time: f.time, show: () => renderFiles(f) })));
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
    // Connected (or failed: its retry takes over) before the page counts as ready: a message sent
    // before the stream is open would have its reply and its run's end streamed to no one.
    const connected = new Promise((resolve) => {
      mine.addEventListener("open", resolve, { once: true });
      mine.addEventListener("error", resolve, { once: true });
    });
    source.onerror = () => {
      if (mine.readyState === EventSource.CLOSED && mine === source) {
        setTimeout(() => { if (mine === source) listen().catch((err) => flash(err.message)); }, 1000);
      }
    };
    source.addEventListener("delta", (e) => {
      const d = JSON.parse(e.data);
      let el = bubbles.get(d.message_id);
      if (!el) { el = bubble("assistant", "", "streaming"); bubbles.set(d.message_id, el); }
      el.dataset.text = d.text;
      el.replaceChildren(md(d.text));
      scroll();
    });
    source.addEventListener("stop_control", (e) => stopControl(JSON.parse(e.data)));
    source.addEventListener("card", (e) => {
      const card = JSON.parse(e.data).card;
      renderCard(card);
      if (card.pending) say("The agent asks for approval: " + card.items.map((i) => i.headline || i.tool).join(", "));
    });
    // Notices and `/memory` cards are kept in the conversation: drawn from it, so each shows once.
    source.addEventListener("notice", () => reload());
    source.addEventListener("memory_card", () => reload());
    source.addEventListener("files", (e) => renderFiles(JSON.parse(e.data)));
    source.addEventListener("report", (e) => bubble("report", JSON.parse(e.data).text, ""));
    source.addEventListener("status", (e) => { status.textContent = JSON.parse(e.data).text; status.hidden = false; });
    source.addEventListener("run_end", () => { status.hidden = true; reload(); conversations().catch(() => {}); });
    await connected;
  }

  // One reload at a time; one asked for meanwhile runs after it (it sees everything then).
  let loading = null;
  let again = false;
  function reload() {
    if (loading) { again = true; return loading; }
    loading = load().catch((err) => flash(err.message)).finally(() => {
      loading = null;
      if (again) { again = false; reload(); }
    });
    return loading;
  }

  // The open conversation drawn and its stream connected. A message sent before that waits for it:
  // sent at once, the drawing would wipe its bubble and the reply would stream to no one (a person
  // typing right after the page opened saw neither, seen as a browser-test failure under load).
  let ready = Promise.resolve();
  async function open(id) {
    conversation = id;
    localStorage.setItem("agent-gateway-conversation", id);
    location.hash = id;
    markCurrent();
    document.body.classList.remove("browsing");
    // The stream first, then the listing: what streams meanwhile is drawn and then drawn again by the
    // listing (which holds it); read the other way round, a delta sent between the two was lost and a
    // reloaded page showed a reply stuck at its listed text until the run's next word (seen in CI).
    ready = (async () => { await listen(); await load(); })();
    await ready;
  }

  async function fresh() {
    const c = await api("POST", "/api/v1/conversations");
    await open(c.id);
    input.focus();
  }

  // --- the sidebar: the person's conversations, newest first, paged; or what a search found ---

  let cursor = null;
  function when(iso) {
    const d = new Date(iso);
    return d.toDateString() === new Date().toDateString()
      ? d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" }) : d.toLocaleDateString();
  }
  function markCurrent() {
    for (const li of list.children) {
      const current = li.dataset.id === conversation;
      li.classList.toggle("current", current);
      const b = li.querySelector("button.open");
      if (current) b.setAttribute("aria-current", "true"); else b.removeAttribute("aria-current");
    }
  }
  function entry(c) {
    const li = document.createElement("li");
    li.dataset.id = c.id;
    const title = c.title || "Nothing said yet";
    const b = document.createElement("button");
    b.type = "button";
    b.className = "open";
    const t = document.createElement("span");
    t.className = "title";
    t.textContent = title;
    const w = document.createElement("span");
    w.className = "when";
    w.textContent = c.last_active ? when(c.last_active) : "";
    b.append(t, w);
    if (c.passage) { const p = document.createElement("span"); p.className = "passage"; p.replaceChildren(md(c.passage)); b.append(p); }
    b.onclick = () => open(c.id).catch((e) => flash(e.message));
    const rename = document.createElement("button");
    rename.type = "button";
    rename.className = "rename";
    rename.textContent = "✎";
    rename.title = "Rename";
    rename.setAttribute("aria-label", "Rename “" + title + "”");
    rename.onclick = async () => {
      const name = prompt("A name for this conversation (empty: its first message):", c.title || "");
      if (name === null) return;
      try { await api("PATCH", "/api/v1/conversations/" + encodeURIComponent(c.id), { title: name }); await conversations(); }
      catch (e) { flash(e.message); }
    };
    const del = document.createElement("button");
    del.type = "button";
    del.className = "delete";
    del.textContent = "✕";
    del.title = "Delete";
    del.setAttribute("aria-label", "Delete “" + title + "”");
    del.onclick = async () => {
      if (!confirm("Delete “" + title + "” and everything said in it? This cannot be undone.")) return;
      try {
        await api("DELETE", "/api/v1/conversations/" + encodeURIComponent(c.id));
        if (c.id === conversation) await fresh();
        await conversations();
        say("Deleted “" + title + "”.");
      } catch (e) { flash(e.message); }
    };
    li.append(b);
    if (c.last_active) li.append(rename, del); // listed by the gateway: something was said in it
    return li;
  }
  async function conversations(next) {
    const q = search.value.trim();
    const query = q ? "?q=" + encodeURIComponent(q) : next ? "?cursor=" + encodeURIComponent(next) : "";
    const data = await api("GET", "/api/v1/conversations" + query);
    const items = data.conversations.map(entry);
    if (next) list.append(...items); else list.replaceChildren(...items);
    // The open conversation is listed even before anything was said in it.
    if (!q && !next && conversation && !data.conversations.some((c) => c.id === conversation)) {
      list.prepend(entry({ id: conversation, title: "", last_active: "" }));
    }
    cursor = data.next_cursor;
    more.hidden = !cursor;
    markCurrent();
  }
  more.onclick = () => conversations(cursor).catch((e) => flash(e.message));
  let searching = null;
  search.addEventListener("input", () => {
    clearTimeout(searching);
    searching = setTimeout(() => conversations().catch((e) => flash(e.message)), 250);
  });
  document.getElementById("menu").onclick = () => {
    const showing = document.body.classList.toggle("browsing");
    document.getElementById("menu").setAttribute("aria-expanded", String(showing));
    if (showing) search.focus();
  };

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
  // The Attach label opens the file picker from the keyboard too.
  const attachLabel = document.getElementById("attach");
  attachLabel.tabIndex = 0;
  attachLabel.setAttribute("role", "button");
  attachLabel.addEventListener("keydown", (e) => { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); picker.click(); } });
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
    flashed.hidden = true;
    await ready.catch(() => {});
    const names = pending.map((f) => f.name);
    const mine = bubble("user", text + (names.length ? "\n\n[Files: " + names.join(", ") + "]" : ""), "");
    try {
      let body = { text };
      if (pending.length) {
        body = new FormData();
        body.append("text", text);
        for (const f of pending) body.append("file", f, f.name);
      }
      const r = await api("POST", path("/messages"), body);
      input.value = "";
      pending = [];
      showAttached();
      if (r.command) { mine.remove(); await reload(); } // the command and its answers, as kept
    } catch (err) { mine.remove(); flash(err.message); }
    finally { send.disabled = false; input.focus(); }
  });
  input.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); form.requestSubmit(); }
  });
  document.getElementById("new").onclick = () => fresh().then(() => conversations()).catch((e) => flash(e.message));

  const start = location.hash.slice(1) || localStorage.getItem("agent-gateway-conversation");
  (start ? open(start).catch(fresh) : fresh()).then(() => conversations()).catch((e) => flash(e.message));
})();
