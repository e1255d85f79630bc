// A request header as Node gives it (a string, a list for a repeated header, or nothing), read as
// the one value every check here takes: the first.
export function headerValue(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value[0] : value;
}
