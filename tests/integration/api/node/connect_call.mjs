// A stock @connectrpc/connect-node client, driven by the API integration tests:
//   node connect_call.mjs '<options json>'
// options: {descriptors, method: "kibotos.ctrl.v1.AgentService/GetAgent", request: {...},
//           binary: bool, http: "1.1"|"2", socket?: path, url?: "https://127.0.0.1:8443",
//           ca?, cert?, key? (PEM file paths), calls?: n,
//           protocol?: "connect"|"grpc"|"grpcweb" (default connect), gzip?: bool (send gzip),
//           timeoutMs?: n}
// Prints {"response": <json>} or {"error": {"code": "...", "message": "..."}} and exits 0.
import { readFileSync } from "node:fs";
import * as net from "node:net";
import { createFileRegistry, fromBinary, fromJson, toJson } from "@bufbuild/protobuf";
import { FileDescriptorSetSchema } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import {
  compressionGzip,
  createConnectTransport,
  createGrpcTransport,
  createGrpcWebTransport,
} from "@connectrpc/connect-node";

const opts = JSON.parse(process.argv[2]);
const registry = createFileRegistry(fromBinary(FileDescriptorSetSchema, readFileSync(opts.descriptors)));
const [serviceName, methodName] = opts.method.split("/");
const service = registry.getService(serviceName);
if (!service) throw new Error(`unknown service ${serviceName}`);
const method = service.methods.find((m) => m.name === methodName);
if (!method) throw new Error(`unknown method ${opts.method}`);

const nodeOptions = {};
if (opts.socket && opts.http === "2") {
  nodeOptions.createConnection = () => net.connect(opts.socket);
} else if (opts.socket) {
  nodeOptions.socketPath = opts.socket;
}
for (const k of ["ca", "cert", "key"]) if (opts[k]) nodeOptions[k] = readFileSync(opts[k]);

const makeTransport = {
  connect: createConnectTransport,
  grpc: createGrpcTransport,
  grpcweb: createGrpcWebTransport,
}[opts.protocol ?? "connect"];
const transport = makeTransport({
  baseUrl: opts.url ?? "http://localhost",
  httpVersion: opts.http ?? "1.1",
  useBinaryFormat: !!opts.binary,
  nodeOptions,
  ...(opts.gzip ? { sendCompression: compressionGzip } : {}),
});
const client = createClient(service, transport);
const snake = (code) => Code[code].replace(/([a-z])([A-Z])/g, "$1_$2").toLowerCase();

let out;
try {
  let response;
  for (let i = 0; i < (opts.calls ?? 1); i++) {
    response = await client[method.localName](fromJson(method.input, opts.request ?? {}),
      opts.timeoutMs ? { timeoutMs: opts.timeoutMs } : {});
  }
  out = { response: toJson(method.output, response) };
} catch (e) {
  const err = ConnectError.from(e);
  out = { error: { code: snake(err.code), message: err.rawMessage } };
}
process.stdout.write(JSON.stringify(out) + "\n");
process.exit(0);
