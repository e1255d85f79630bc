// Code blocks of the project's Markdown that tests run (the runbooks, the README's walk-through).

export interface FencedBlock {
  file: string;
  /** The line the block's first command is on (1-based). */
  line: number;
  code: string;
}

/** The blocks of a Markdown text fenced as ```sh <tag>, in order; blocks with another tag or none are left out. */
export function fencedBlocks(file: string, text: string, tag: string): FencedBlock[] {
  const blocks: FencedBlock[] = [];
  const lines = text.split("\n");
  const opening = new RegExp(`^\`\`\`sh ${tag}\\s*$`);
  for (let i = 0; i < lines.length; i++) {
    if (!opening.test(lines[i]!)) continue;
    const start = i + 1;
    const body: string[] = [];
    for (i++; i < lines.length && !/^```\s*$/.test(lines[i]!); i++) body.push(lines[i]!);
    blocks.push({ file, line: start + 1, code: body.join("\n") });
  }
  return blocks;
}
