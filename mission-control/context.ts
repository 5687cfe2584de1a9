// The request context every mission control handler gets: who is signed in, and the page's nonce.
import type { Context } from 'hono';
import type { Principal } from '../store/tokens.ts';

export type McEnv = { Variables: { principal: Principal; nonce: string } };
export type McContext = Context<McEnv>;
