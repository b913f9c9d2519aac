/** The SDK's errors: `MnemeError` and one subclass per kind of error answer. */

export interface ErrorDetails {
  /** The HTTP status; undefined when no answer came back. */
  status?: number | undefined;
  /** The error kind the service named (`not_found_error`, …), or the SDK's own. */
  type?: string | undefined;
  /** The answer's `request-id` header: quote it when reporting a failure. */
  requestId?: string | undefined;
  /** What failed underneath (a connection error's own error). */
  cause?: unknown;
}

/** Any failure of a call. */
export class MnemeError extends Error {
  readonly status: number | undefined;
  readonly type: string | undefined;
  readonly requestId: string | undefined;

  constructor(message: string, details: ErrorDetails = {}) {
    super(message, details.cause === undefined ? undefined : { cause: details.cause });
    this.name = new.target.name;
    this.status = details.status;
    this.type = details.type;
    this.requestId = details.requestId;
  }
}

/** 400, and every other 4xx not listed below: the request itself is wrong. */
export class InvalidRequestError extends MnemeError {}

/** 401: missing, unknown or revoked API key (also: no key configured at all). */
export class AuthenticationError extends MnemeError {}

/** 403: the key lacks a scope, or the memory model cannot serve an option. */
export class PermissionDeniedError extends MnemeError {}

/** 404: no such thing, or not readable by this key. */
export class NotFoundError extends MnemeError {}

/** 409: a precondition, a taken path or name, a reused Idempotency-Key. */
export class ConflictError extends MnemeError {}

/** 429: the workspace's requests per minute are used up (retried first). */
export class RateLimitError extends MnemeError {}

/** 5xx: the service failed or is unavailable (503s are retried first); also a timeout. */
export class APIError extends MnemeError {}

const BY_STATUS: Record<number, typeof MnemeError> = {
  400: InvalidRequestError,
  401: AuthenticationError,
  403: PermissionDeniedError,
  404: NotFoundError,
  409: ConflictError,
  429: RateLimitError,
};

/** The error for an answer: `{"type": "error", "error": {type, message}}`, or whatever
 * text a proxy in between sent. */
export function errorFor(status: number, text: string, requestId: string | undefined): MnemeError {
  let type: string | undefined;
  let message = text.slice(0, 500) || `HTTP ${status}`;
  try {
    const error: unknown = (JSON.parse(text) as { error?: unknown }).error;
    if (isErrorBody(error)) {
      ({ type, message } = error);
    }
  } catch {
    // not JSON: the text itself is the message
  }
  const Class = BY_STATUS[status] ?? (status >= 500 ? APIError : InvalidRequestError);
  return new Class(message, { status, type, requestId });
}

function isErrorBody(value: unknown): value is { type: string; message: string } {
  const v = value as { type?: unknown; message?: unknown } | null | undefined;
  return typeof v?.type === "string" && typeof v.message === "string";
}
