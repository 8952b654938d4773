// Compiles bookline's JSON Schemas with ajv in strict mode (every strict
// check on), all of them in one instance so that their references resolve.
const Ajv2020=require('ajv/dist/2020'),addFormats=require('ajv-formats'),fs=require('fs');
const ajv=new Ajv2020({strict:true,strictRequired:true,allErrors:true}); addFormats(ajv);
const files=process.argv.slice(2);
for(const f of files) ajv.addSchema(JSON.parse(fs.readFileSync(f,'utf8')));
let bad=0;
for(const f of files){
  const id=JSON.parse(fs.readFileSync(f,'utf8')).$id;
  try{ajv.getSchema(id);console.log('ok',id)}catch(e){bad++;console.log('FAIL',id,e.message)}
}
process.exit(bad?1:0);
