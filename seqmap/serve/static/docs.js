// The offline API reference: each route of /openapi.json with its summary, request fields and answers.

"use strict";

const el = (tag, text, className) => {
  const node = document.createElement(tag);
  if (text !== undefined) node.textContent = text;
  if (className) node.className = className;
  return node;
};

function resolve(schema, spec) {
  const ref = schema && schema.$ref;
  return ref ? spec.components.schemas[ref.split("/").pop()] : schema;
}

function typeName(schema, spec) {
  if (!schema) return "";
  if (schema.$ref) return schema.$ref.split("/").pop();
  if (schema.anyOf) return schema.anyOf.map((s) => typeName(s, spec)).join(" | ");
  if (schema.type === "array") return `list[${typeName(schema.items, spec)}]`;
  return schema.type || "";
}

function fieldsTable(schema, spec) {
  const body = resolve(schema, spec);
  const table = el("table", undefined, "fields");
  const head = table.insertRow();
  ["field", "type", "default", "meaning"].forEach((name) => head.appendChild(el("th", name)));
  const required = new Set(body.required || []);
  Object.entries(body.properties || {}).forEach(([name, field]) => {
    const row = table.insertRow();
    row.appendChild(el("td", name + (required.has(name) ? " (required)" : "")));
    row.appendChild(el("td", typeName(field, spec)));
    row.appendChild(el("td", "default" in field ? JSON.stringify(field.default) : ""));
    row.appendChild(el("td", field.description || ""));
  });
  return table;
}

function route(path, method, operation, spec) {
  const section = el("section", undefined, "panel");
  section.appendChild(el("h2", `${method.toUpperCase()} ${path}`));
  if (operation.description || operation.summary) section.appendChild(el("p", operation.description || operation.summary));
  const request = operation.requestBody && operation.requestBody.content["application/json"];
  if (request) {
    const name = typeName(request.schema, spec);
    section.appendChild(el("h3", `request body: ${name}`));
    const description = resolve(request.schema, spec).description;
    if (description) section.appendChild(el("p", description, "muted"));
    section.appendChild(fieldsTable(request.schema, spec));
  }
  const answers = Object.entries(operation.responses || {}).map(([status, answer]) => {
    const json = answer.content && answer.content["application/json"];
    return `${status}: ${json && json.schema ? typeName(json.schema, spec) : answer.description}`;
  });
  section.appendChild(el("p", `answers: ${answers.join("; ")}`, "muted"));
  return section;
}

fetch("/openapi.json")
  .then((response) => response.json())
  .then((spec) => {
    const main = document.getElementById("routes");
    main.replaceChildren(el("p", `${spec.info.title} ${spec.info.version}: ${spec.info.description || ""}`));
    Object.entries(spec.paths).forEach(([path, methods]) => {
      Object.entries(methods).forEach(([method, operation]) => main.appendChild(route(path, method, operation, spec)));
    });
  })
  .catch((error) => {
    document.getElementById("routes").replaceChildren(el("p", `could not read /openapi.json: ${error}`));
  });
