// The seqmap page: translate (or generate) through the server's API and explore attention.
//
// Attention arrives as weights[layer][head][output token][source token] (see /docs, the
// Attention schema). The page shows one (output x source) map at a time: one head of one
// layer, or the average over heads and/or layers. Hovering over an output token marks the
// source tokens whose weight is at least HIGHLIGHT of that row's largest with the class
// "attended" (and the largest with "attended-max").
"use strict";

const HIGHLIGHT = 0.5; // fraction of a row's largest weight that counts as "attended"
const AVERAGE = "avg";

const state = {
  info: null, // GET /info
  results: [], // translations (or the one generation) of the last request
  selected: 0, // which result the heatmap shows
  matrix: null, // the (output x source) map on screen
};

const $ = (id) => document.getElementById(id);

async function api(path, body) {
  const response = await fetch(path, body === undefined ? {} : {
    method: "POST",
    headers: {"content-type": "application/json"},
    body: JSON.stringify(body),
  });
  const data = await response.json().catch(() => ({detail: `HTTP ${response.status}`}));
  if (!response.ok) {
    throw new Error(data.detail || `HTTP ${response.status}`);
  }
  return data;
}

function showError(message) {
  const box = $("error");
  box.textContent = message || "";
  box.hidden = !message;
}

// -- setup from /info --------------------------------------------------------------------------

async function init() {
  try {
    state.info = await api("/info");
  } catch (error) {
    showError(`cannot read /info: ${error.message}`);
    return;
  }
  const info = state.info;
  if (info.task === "classification" || info.task === "image") {
    initClassify(info);
    return;
  }
  const langs = info.languages;
  const task = info.task === "lm" ? "language model" : `${langs.source} → ${langs.target}`;
  $("model-info").textContent = `${info.family} ${task} · ${info.parameters.toLocaleString("en")} parameters · ` +
    `${info.vocabulary.tokenizer} vocabulary ${info.vocabulary.target}` +
    (info.step === null ? "" : ` · step ${info.step}`);
  const decode = info.decode_defaults;
  if (info.task === "lm") {
    $("generate-panel").hidden = false;
    $("max-new-tokens").value = Math.min(decode.max_new_tokens, info.limits.max_new_tokens);
    $("max-new-tokens").max = info.limits.max_new_tokens;
    $("temperature").value = decode.temperature;
    $("top-k").value = decode.top_k;
    $("top-p").value = decode.top_p;
    $("generate-form").addEventListener("submit", onGenerate);
  } else {
    $("translate-panel").hidden = false;
    $("beam-size").value = decode.beam_size;
    $("beam-size").max = info.limits.max_beam;
    $("length-penalty").value = decode.length_penalty;
    $("translate-form").addEventListener("submit", onTranslate);
  }
  fillSelect($("layer-select"), info.attention.layers, info.attention.layers - 1, "layer");
  fillSelect($("head-select"), info.attention.heads, AVERAGE, "head");
  $("layer-select").addEventListener("change", drawAttention);
  $("head-select").addEventListener("change", drawAttention);
}

function fillSelect(select, count, chosen, noun) {
  select.replaceChildren();
  const options = [[AVERAGE, `average of ${noun}s`]];
  for (let i = 0; i < count; i++) options.push([String(i), `${noun} ${i}`]);
  for (const [value, label] of options) {
    const option = document.createElement("option");
    option.value = value;
    option.textContent = label;
    option.selected = value === String(chosen);
    select.append(option);
  }
}

// -- requests ----------------------------------------------------------------------------------

async function onTranslate(event) {
  event.preventDefault();
  const texts = $("source-text").value.split("\n").map((t) => t.trim()).filter((t) => t);
  if (!texts.length) {
    showError("type a sentence to translate");
    return;
  }
  const body = {
    text: texts,
    beam_size: Number($("beam-size").value),
    n_best: Number($("n-best").value),
    length_penalty: Number($("length-penalty").value),
    attention: state.info.attention.available,
  };
  await run("/translate", body, (data) => data.translations, "translate-button");
}

async function onGenerate(event) {
  event.preventDefault();
  const body = {
    prompt: $("prompt-text").value,
    max_new_tokens: Number($("max-new-tokens").value),
    sample: $("sample").checked,
    temperature: Number($("temperature").value),
    top_k: Number($("top-k").value),
    top_p: Number($("top-p").value),
    seed: Number($("seed").value),
    attention: state.info.attention.available,
  };
  await run("/generate", body, (data) => [data], "generate-button");
}

async function run(path, body, results, buttonId) {
  const button = $(buttonId);
  button.disabled = true;
  showError("");
  $("status").textContent = "working...";
  const start = performance.now();
  try {
    state.results = results(await api(path, body));
    state.selected = 0;
    $("status").textContent = `answered in ${Math.round(performance.now() - start)} ms`;
    showResults();
  } catch (error) {
    $("status").textContent = "";
    showError(error.message);
  } finally {
    button.disabled = false;
  }
}

// -- output ------------------------------------------------------------------------------------

function showResults() {
  $("output").hidden = false;
  const list = $("translations");
  list.replaceChildren();
  const generation = state.info.task === "lm";
  list.hidden = generation;
  $("generated").hidden = !generation;
  if (generation) {
    const result = state.results[0];
    $("generated").querySelector(".prompt").textContent = result.prompt;
    $("generated-text").textContent = result.text;
  } else {
    state.results.forEach((result, i) => {
      const item = document.createElement("li");
      item.className = "translation-item" + (i === state.selected ? " selected" : "");
      item.title = "show the attention of this translation";
      const source = document.createElement("div");
      source.className = "source muted";
      source.textContent = result.source;
      const text = document.createElement("div");
      text.className = "translation";
      text.textContent = result.translation;
      item.append(source, text);
      if (result.nbest.length > 1) {
        const nbest = document.createElement("ol");
        nbest.className = "nbest";
        for (const entry of result.nbest) {
          const line = document.createElement("li");
          line.textContent = `${entry.text}   (${entry.normalized.toFixed(3)})`;
          nbest.append(line);
        }
        item.append(nbest);
      }
      item.addEventListener("click", () => {
        state.selected = i;
        list.querySelectorAll(".translation-item").forEach((el, j) => el.classList.toggle("selected", j === i));
        drawAttention();
      });
      list.append(item);
    });
  }
  drawAttention();
}

// -- attention ---------------------------------------------------------------------------------

function chosenMap(attention) {
  // The (T x S) map for the layer and head selectors: one of them, or a mean.
  const layerValue = $("layer-select").value;
  const headValue = $("head-select").value;
  const layers = layerValue === AVERAGE ? [...Array(attention.layers).keys()] : [Number(layerValue)];
  const heads = headValue === AVERAGE ? [...Array(attention.heads).keys()] : [Number(headValue)];
  const rows = attention.output_tokens.length;
  const cols = attention.source_tokens.length;
  const map = Array.from({length: rows}, () => new Array(cols).fill(0));
  for (const l of layers) {
    for (const h of heads) {
      const w = attention.weights[l][h];
      for (let i = 0; i < rows; i++) for (let j = 0; j < cols; j++) map[i][j] += w[i][j];
    }
  }
  const n = layers.length * heads.length;
  return map.map((row) => row.map((v) => v / n));
}

function label(token) {
  return token.trim() === "" ? "␣".repeat(Math.max(token.length, 1)) : token;
}

function tokenSpan(token, cls, index) {
  const span = document.createElement("span");
  span.className = cls;
  span.dataset.index = String(index);
  span.textContent = label(token);
  return span;
}

function drawAttention() {
  const result = state.results[state.selected];
  const attention = result && result.attention;
  $("attention-panel").hidden = !attention;
  if (!attention) return;
  const map = chosenMap(attention);
  state.matrix = map;
  const vmax = Math.max(1e-9, ...map.flat());

  $("source-tokens").replaceChildren(...attention.source_tokens.map((t, j) => tokenSpan(t, "src-token", j)));
  $("output-tokens").replaceChildren(...attention.output_tokens.map((t, i) => tokenSpan(t, "out-token", i)));

  const table = $("heatmap");
  table.replaceChildren();
  const head = table.createTHead().insertRow();
  head.append(document.createElement("th"));
  attention.source_tokens.forEach((t, j) => {
    const th = document.createElement("th");
    th.className = "col-head";
    th.dataset.col = String(j);
    th.append(tokenSpan(t, "src-token", j));
    head.append(th);
  });
  const body = table.createTBody();
  attention.output_tokens.forEach((t, i) => {
    const row = body.insertRow();
    row.dataset.row = String(i);
    const th = document.createElement("th");
    th.className = "row-head";
    th.append(tokenSpan(t, "out-token", i));
    row.append(th);
    map[i].forEach((w, j) => {
      const cell = row.insertCell();
      cell.className = "cell";
      cell.dataset.row = String(i);
      cell.dataset.col = String(j);
      cell.style.backgroundColor = `rgba(29, 78, 216, ${(w / vmax).toFixed(3)})`;
      cell.title = `${label(t)} → ${label(attention.source_tokens[j])}: ${w.toFixed(3)}`;
    });
  });
  document.querySelectorAll("#attention-panel .out-token").forEach((el) => {
    el.addEventListener("mouseenter", () => highlight(Number(el.dataset.index)));
    el.addEventListener("mouseleave", () => highlight(null));
  });
  table.querySelectorAll("td.cell").forEach((el) => {
    el.addEventListener("mouseenter", () => highlight(Number(el.dataset.row)));
    el.addEventListener("mouseleave", () => highlight(null));
  });
}

function highlight(row) {
  // Mark output token `row` and the source tokens it attends to (null clears every mark).
  const panel = $("attention-panel");
  panel.querySelectorAll(".attended, .attended-max, .active").forEach((el) => {
    el.classList.remove("attended", "attended-max", "active");
  });
  panel.querySelectorAll("tr.active-row").forEach((el) => el.classList.remove("active-row"));
  if (row === null || !state.matrix) {
    $("hover-info").textContent = "";
    return;
  }
  const weights = state.matrix[row];
  const best = weights.indexOf(Math.max(...weights));
  panel.querySelectorAll(`.out-token[data-index="${row}"]`).forEach((el) => el.classList.add("active"));
  panel.querySelectorAll(`tr[data-row="${row}"]`).forEach((el) => el.classList.add("active-row"));
  weights.forEach((w, j) => {
    if (w < HIGHLIGHT * weights[best]) return;
    panel.querySelectorAll(`.src-token[data-index="${j}"]`).forEach((el) => {
      el.classList.add("attended");
      if (j === best) el.classList.add("attended-max");
    });
  });
  const tokens = state.results[state.selected].attention;
  $("hover-info").textContent = `${label(tokens.output_tokens[row])} attends most to ` +
    `${label(tokens.source_tokens[best])} (${weights[best].toFixed(3)})`;
}

// -- classifiers: texts or an uploaded image -------------------------------------------------------

function initClassify(info) {
  const what = info.task === "image" ? `images ${info.input.width}x${info.input.height}` : "texts";
  $("model-info").textContent = `${info.family} classifier of ${what} · ${info.classes.length} classes · ` +
    `${info.parameters.toLocaleString("en")} parameters` + (info.step === null ? "" : ` · step ${info.step}`);
  $("classify-panel").hidden = false;
  if (info.task === "image") {
    $("classify-label").textContent = "Image to classify";
    $("classify-label").htmlFor = "classify-image";
    $("classify-text").hidden = true;
    $("classify-image").hidden = false;
  }
  $("classify-top").max = info.classes.length;
  $("classify-top").value = Math.min(5, info.classes.length);
  $("classify-form").addEventListener("submit", onClassify);
  $("map-select").addEventListener("change", drawClassAttention);
}

function readAsDataURL(file) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(reader.result);
    reader.onerror = () => reject(new Error(`cannot read ${file.name}`));
    reader.readAsDataURL(file);
  });
}

async function onClassify(event) {
  event.preventDefault();
  showError("");
  const body = {top: Number($("classify-top").value), attention: state.info.attention.available};
  if (state.info.task === "image") {
    const file = $("classify-image").files[0];
    if (!file) {
      showError("choose an image file first");
      return;
    }
    body.image = await readAsDataURL(file);
    state.imageURL = body.image;
  } else {
    body.text = $("classify-text").value;
  }
  $("classify-button").disabled = true;
  $("status").textContent = "classifying...";
  try {
    const data = await api("/classify", body);
    state.classification = data.classifications[0];
    showClassification();
  } catch (error) {
    showError(error.message);
  } finally {
    $("classify-button").disabled = false;
    $("status").textContent = "";
  }
}

function showClassification() {
  const result = state.classification;
  const list = $("classes");
  list.replaceChildren();
  for (const score of result.top) {
    const item = document.createElement("li");
    item.className = "class-item";
    item.textContent = `${score.label} ${score.probability.toFixed(3)}`;
    const bar = document.createElement("span");
    bar.className = "bar";
    bar.style.width = `${Math.round(200 * score.probability)}px`;
    item.appendChild(bar);
    list.appendChild(item);
  }
  $("prediction-panel").hidden = false;
  drawClassAttention();
}

function drawClassAttention() {
  const attention = state.classification && state.classification.attention;
  $("token-weights").replaceChildren();
  $("image-attention").hidden = true;
  if (!attention) {
    return;
  }
  const weights = attention[$("map-select").value];
  const top = Math.max(...weights, 1e-12);
  if (attention.tokens) {
    attention.tokens.forEach((token, i) => {
      const span = document.createElement("span");
      span.className = "weighted-token";
      span.textContent = label(token);
      span.title = weights[i].toFixed(4);
      span.dataset.weight = weights[i];
      span.style.background = `rgba(245, 158, 11, ${(weights[i] / top).toFixed(3)})`;
      $("token-weights").appendChild(span);
    });
    return;
  }
  const canvas = $("image-attention");
  const context = canvas.getContext("2d");
  const [rows, cols] = attention.grid;
  const image = new Image();
  image.onload = () => {
    context.imageSmoothingEnabled = false;
    context.drawImage(image, 0, 0, canvas.width, canvas.height);
    const w = canvas.width / cols, h = canvas.height / rows;
    weights.forEach((value, i) => {
      context.fillStyle = `rgba(245, 158, 11, ${(0.75 * value / top).toFixed(3)})`;
      context.fillRect((i % cols) * w, Math.floor(i / cols) * h, w, h);
    });
    canvas.dataset.drawn = "1";
  };
  canvas.hidden = false;
  canvas.dataset.drawn = "";
  image.src = state.imageURL;
}

init();
