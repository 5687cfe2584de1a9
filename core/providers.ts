// The model providers the worker speaks to natively, and where each sends requests by default: what
// the store (checking a row's key grant against its host) and the models both need.
export const NATIVE_PROVIDERS = ['anthropic', 'openai'] as const;
export type NativeProvider = (typeof NATIVE_PROVIDERS)[number];

/** Where each native provider's SDK sends requests when the row names no base URL. */
export const DEFAULT_BASE_URLS: Record<NativeProvider, string> = {
  anthropic: 'https://api.anthropic.com/v1',
  openai: 'https://api.openai.com/v1',
};

export function nativeBaseUrl(provider: NativeProvider, baseURL: string | null | undefined): string {
  return baseURL ?? DEFAULT_BASE_URLS[provider];
}
