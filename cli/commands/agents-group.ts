// forge agents releases ... | agents rollout ...: fleet-wide agent upgrades (docs/upgrades.md).
// The CLI's commands are two words; these take a third (the verb), dispatched here.
import { UsageError, type Command, type Group, type OptionDef } from "../args.js";
import { releasesVerbs } from "./agents-releases.js";
import { rolloutVerbs } from "./agents-rollouts.js";

/** A command whose first argument names one of `verbs`, each a command of its own. */
function verbCommand(name: string, summary: string, verbs: Command[]): Command {
  const options: Record<string, OptionDef> = Object.assign({}, ...verbs.map((v) => v.options ?? {}));
  const synopses = verbs.map((v) => `  ${name} ${v.name}${v.args ? ` ${v.args}` : ""}  ${v.summary}`).join("\n");
  return {
    name,
    summary,
    args: `{${verbs.map((v) => v.name).join("|")}} ...`,
    positionals: { min: 1, max: 2 },
    options,
    notes: `${synopses}\n`,
    interruptible: true,
    async run(ctx, values, positionals) {
      const verb = verbs.find((v) => v.name === positionals[0]);
      if (verb === undefined) throw new UsageError(`unknown command "agents ${name} ${positionals[0]}"`, `forge agents ${name} --help`);
      const foreign = Object.keys(options).filter((o) => values[o] !== undefined && !(o in (verb.options ?? {})));
      if (foreign.length > 0) throw new UsageError(`--${foreign[0]} is not an option of "agents ${name} ${verb.name}"`);
      const rest = positionals.slice(1);
      const range = verb.positionals ?? { min: 0, max: 0 };
      if (rest.length < range.min) throw new UsageError(`missing ${verb.args ?? "argument"}`);
      if (rest.length > range.max) throw new UsageError(`unexpected argument "${rest[range.max]}"`);
      return verb.run(ctx, values, rest);
    },
  };
}

export const agentsGroup: Group = {
  name: "agents",
  summary: "Agent releases and staged rollouts of them",
  topic: "agent upgrades",
  commands: [
    verbCommand("releases", "Push and list agent releases", releasesVerbs),
    verbCommand("rollout", "Roll a release out to the fleet in batches", rolloutVerbs),
  ],
};
