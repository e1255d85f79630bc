// The operator roles, lowest first: the names configuration, the database and the role table share.
export const operatorRoles = ["viewer", "operator", "admin"] as const;
export type OperatorRole = (typeof operatorRoles)[number];

export const isOperatorRole = (s: string): s is OperatorRole => (operatorRoles as readonly string[]).includes(s);

/** Whether `role` is at least `floor`. */
export const roleAtLeast = (role: OperatorRole, floor: OperatorRole): boolean =>
  operatorRoles.indexOf(role) >= operatorRoles.indexOf(floor);

/** The lower of two roles: what a personal token acts with once its user's role has changed. */
export const lowerRole = (a: OperatorRole, b: OperatorRole): OperatorRole => (roleAtLeast(a, b) ? b : a);
